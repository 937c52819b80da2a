//! The ValidatingAdmissionPolicy of `policy export --vap`, evaluated with a
//! CEL interpreter (the `cel` crate, with `matches` and the strings
//! extension) the way kube-apiserver evaluates it, and compared with the
//! webhook's own decision on the same AdmissionReview: the same allowed or
//! denied, case by case, and the same decision, removed and unauthorized
//! finalizers and override.
//!
//! Reviews: the case files of tests/fixtures/cases/ and cases-warn/ under
//! their policies, a table of our own, and random reviews under random
//! policies (proptest). What CEL cannot decide is listed by name: case
//! files that are not AdmissionReviews the webhook can decide (it answers
//! 400), and policies the export refuses.
//!
//! The interpreter runs the expressions as exported (read back from the
//! YAML); kube-apiserver's own compiler and cost limits are tested on a
//! real control plane (tests/e2e/vap.rs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::{Context, Env, Program, Value as Cel, extensions};
use finalizer_guard::admission::{self, ReviewBuilder, Reviewed};
use finalizer_guard::offline::vap::{self, ExportError};
use finalizer_guard::policy::builtin::{BUILTIN_CONTROLLERS, KUBE_CONTROLLER_MANAGER};
use finalizer_guard::policy::{FinalizerField, Mode, Outcome, Policy, Verdict};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

mod common;
use common::cel::{bind_request, json_files, review_in};

use common::repository::root as crate_root;

fn fixture_policy(file: &str) -> Policy {
    finalizer_guard::policy::load(&crate_root().join("tests/fixtures").join(file)).unwrap()
}

/// kube-apiserver's CEL environment, as far as the expressions use it.
fn environment() -> Arc<Env> {
    let mut env = Env::stdlib();
    env.add_extension(extensions::strings).unwrap();
    Arc::new(env)
}

/// The exported policy and binding, read back from the YAML and compiled.
struct Vap {
    env: Arc<Env>,
    conditions: Vec<(String, Program)>,
    variables: Vec<(String, Program)>,
    validation: Program,
    message: Program,
    audit: Vec<(String, Program)>,
    actions: Vec<String>,
}

/// What kube-apiserver does with one request under the policy.
#[derive(Debug)]
struct Evaluation {
    /// The matchConditions held: the validations were evaluated.
    matched: bool,
    /// Deny among the binding's actions and the validation false.
    denied: bool,
    /// Warn among them and the validation false.
    warned: bool,
    /// `variables.decision`: '' when nothing was removed.
    decision: String,
    message: Option<String>,
    /// Non-empty audit annotations, by key.
    annotations: BTreeMap<String, String>,
}

impl Vap {
    fn export(policy: &Policy) -> Vap {
        let yaml = vap::export_yaml(policy).expect("the policy exports");
        Vap::read(&yaml)
    }

    fn read(yaml: &str) -> Vap {
        let mut documents = serde_yaml_ng::Deserializer::from_str(yaml);
        let policy =
            ValidatingAdmissionPolicy::deserialize(documents.next().expect("a policy")).unwrap();
        let binding =
            ValidatingAdmissionPolicyBinding::deserialize(documents.next().expect("a binding"))
                .unwrap();
        assert!(documents.next().is_none(), "two documents");
        let spec = policy.spec.expect("spec");
        assert_eq!(binding.spec.policy_name, vap::NAME);
        let env = environment();
        let compile = |what: &str, expression: &str| {
            env.compile(expression)
                .unwrap_or_else(|e| panic!("{what} does not compile: {e}\n{expression}"))
        };
        let validations = spec.validations.expect("validations");
        assert_eq!(validations.len(), 1);
        let validation = &validations[0];
        Vap {
            conditions: spec
                .match_conditions
                .unwrap_or_default()
                .iter()
                .map(|c| (c.name.clone(), compile(&c.name, &c.expression)))
                .collect(),
            variables: spec
                .variables
                .unwrap_or_default()
                .iter()
                .map(|v| (v.name.clone(), compile(&v.name, &v.expression)))
                .collect(),
            validation: compile("the validation", &validation.expression),
            message: compile(
                "the messageExpression",
                validation.message_expression.as_deref().expect("a message"),
            ),
            audit: spec
                .audit_annotations
                .unwrap_or_default()
                .iter()
                .map(|a| (a.key.clone(), compile(&a.key, &a.value_expression)))
                .collect(),
            actions: binding.spec.validation_actions,
            env,
        }
    }

    /// Evaluates the policy on one AdmissionReview. An evaluation error is
    /// an `Err`: kube-apiserver would refuse the write (failurePolicy Fail),
    /// and the export must never cause one.
    fn evaluate(&self, review: &Value) -> Result<Evaluation, String> {
        let request = &review["request"];
        let mut evaluation = Evaluation {
            matched: false,
            denied: false,
            warned: false,
            decision: String::new(),
            message: None,
            annotations: BTreeMap::new(),
        };
        // matchConstraints: UPDATE of every resource and subresource.
        if request["operation"] != "UPDATE" {
            return Ok(evaluation);
        }
        let mut context = Context::with_env(self.env.clone());
        bind_request(&mut context, request);
        for (name, program) in &self.conditions {
            match program.execute(&context) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => return Ok(evaluation),
                other => return Err(format!("matchCondition {name}: {other:?}")),
            }
        }
        evaluation.matched = true;
        // kube-apiserver evaluates variables lazily, on first use; every one
        // is used, so evaluating them in order is the same.
        let mut variables: HashMap<String, Cel> = HashMap::new();
        for (name, program) in &self.variables {
            let value = program
                .execute(&context)
                .map_err(|e| format!("variable {name}: {e}"))?;
            variables.insert(name.clone(), value);
            context.add_variable_from_value("variables", variables.clone());
        }
        evaluation.decision = match variables.get("decision") {
            Some(Cel::String(s)) => s.to_string(),
            other => return Err(format!("variables.decision is {other:?}")),
        };
        let passed = match self.validation.execute(&context) {
            Ok(Cel::Bool(b)) => b,
            other => return Err(format!("the validation: {other:?}")),
        };
        if !passed {
            evaluation.message = match self.message.execute(&context) {
                Ok(Cel::String(s)) => Some(s.to_string()),
                other => return Err(format!("the messageExpression: {other:?}")),
            };
            evaluation.denied = self.actions.iter().any(|a| a == "Deny");
            evaluation.warned = self.actions.iter().any(|a| a == "Warn");
        }
        for (key, program) in &self.audit {
            match program.execute(&context) {
                // kube-apiserver trims the value and leaves an empty one out.
                Ok(Cel::String(s)) if s.trim().is_empty() => {}
                Ok(Cel::String(s)) => {
                    evaluation.annotations.insert(key.clone(), s.trim().into());
                }
                Ok(Cel::Null) => {}
                other => return Err(format!("auditAnnotation {key}: {other:?}")),
            }
        }
        Ok(evaluation)
    }
}

/// The names in a comma-separated audit annotation, each once.
fn names(annotations: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in annotations
        .get(key)
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
    {
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    out
}

fn webhook_names(reviewed: &Reviewed, field: FinalizerField, unauthorized: bool) -> Vec<String> {
    reviewed
        .decision
        .removed
        .iter()
        .filter(|r| r.field == field && (!unauthorized || r.authorized_by.is_none()))
        .map(|r| r.finalizer.clone())
        .collect()
}

/// What a review came to, when the policy and the webhook agree.
#[derive(Debug, PartialEq, Eq)]
enum Agreed {
    /// Both allow it, or both deny it, with this verdict.
    Decided { allowed: bool, verdict: Verdict },
    /// The webhook answers 400: not an AdmissionReview it decides.
    Undecidable(String),
}

/// Evaluates the review both ways: `Err` when they disagree.
fn compare(vap: &Vap, policy: &Policy, review: &Value) -> Result<Agreed, String> {
    let body = serde_json::to_vec(review).unwrap();
    let reviewed = match admission::review(policy, &body) {
        Ok(r) => r,
        Err(e) => return Ok(Agreed::Undecidable(e.to_string())),
    };
    let evaluation = vap.evaluate(review)?;
    let verdict = reviewed.verdict();
    let allowed = !evaluation.denied;
    if policy.override_settings.approval.is_some()
        && let Some(agreed) = compare_two_person(&evaluation, policy, &reviewed)?
    {
        return Ok(agreed);
    }
    if allowed != reviewed.allowed() {
        return Err(format!(
            "the policy {} it, the webhook decides {verdict}: {evaluation:?}",
            if allowed { "allows" } else { "denies" }
        ));
    }
    let want = match verdict {
        Verdict::NotJudged | Verdict::NothingRemoved => "",
        v => v.as_str(),
    };
    if evaluation.decision != want {
        return Err(format!(
            "decision {:?}, the webhook's {verdict}",
            evaluation.decision
        ));
    }
    if evaluation.warned != (verdict == Verdict::WouldDeny) {
        return Err(format!("warned {}, verdict {verdict}", evaluation.warned));
    }
    let a = &evaluation.annotations;
    for (key, field, unauthorized) in [
        ("removed-finalizers", FinalizerField::Metadata, false),
        ("removed-spec-finalizers", FinalizerField::Spec, false),
        ("unauthorized-finalizers", FinalizerField::Metadata, true),
        ("unauthorized-spec-finalizers", FinalizerField::Spec, true),
    ] {
        let (got, want) = (names(a, key), webhook_names(&reviewed, field, unauthorized));
        if got != want {
            return Err(format!("{key}: {got:?}, the webhook's {want:?}"));
        }
    }
    let (reason, detail) = match &reviewed.decision.outcome {
        Outcome::Override(o) => (Some(o.reason.clone()), Some(o.detail.clone())),
        _ => (None, None),
    };
    if a.get("override-reason") != reason.as_ref() || a.get("override-detail") != detail.as_ref() {
        return Err(format!(
            "override {:?}: {:?}, the webhook's {reason:?}: {detail:?}",
            a.get("override-reason"),
            a.get("override-detail")
        ));
    }
    // Every authority the webhook names is named (the policy may name more
    // rules: every one that covers, not the first).
    let authorities = a.get("authorized-by").cloned().unwrap_or_default();
    for removal in &reviewed.decision.removed {
        if let Some(authority) = &removal.authorized_by
            && !authorities.split(", ").any(|n| n == authority.to_string())
        {
            return Err(format!("authorized-by {authorities:?} lacks {authority}"));
        }
    }
    if let (Some(message), Some(webhook)) = (&evaluation.message, &reviewed.message) {
        // The same facts: each unauthorized finalizer and the override's key.
        for removal in reviewed.decision.unauthorized() {
            let quoted = format!("{:?}", removal.finalizer);
            if !message.contains(&quoted) {
                return Err(format!(
                    "the message lacks {quoted}: {message}\nwebhook: {webhook}"
                ));
            }
        }
        if !message.contains(&policy.override_settings.annotation) {
            return Err(format!("the message lacks the annotation: {message}"));
        }
    }
    let mode = (verdict == Verdict::Denied || verdict == Verdict::WouldDeny)
        .then(|| policy.mode.as_str().to_string());
    if a.get("mode") != mode.as_ref() {
        return Err(format!("mode {:?}, want {mode:?}", a.get("mode")));
    }
    Ok(Agreed::Decided { allowed, verdict })
}

/// Under `override.approval`, where the policy may differ from the webhook,
/// and only in the safe direction: an override the webhook takes on an
/// approval is denied here (the policy takes no override), and a write of
/// the approval annotations, which the webhook alone judges, is decided
/// here by its removals alone. `None`: no difference to allow for.
fn compare_two_person(
    evaluation: &Evaluation,
    policy: &Policy,
    reviewed: &Reviewed,
) -> Result<Option<Agreed>, String> {
    let denied = match policy.mode {
        Mode::Enforce => "denied",
        Mode::Warn => "would-deny",
    };
    let removals_alone = if reviewed.decision.removed.is_empty() {
        ""
    } else if reviewed.decision.unauthorized().count() == 0 {
        "authorized"
    } else {
        denied
    };
    match &reviewed.decision.outcome {
        Outcome::Override(_) => {
            if evaluation.decision != denied {
                return Err(format!(
                    "an approved override: the policy decides {:?}, it must deny",
                    evaluation.decision
                ));
            }
            Ok(Some(Agreed::Decided {
                allowed: !evaluation.denied,
                verdict: reviewed.verdict(),
            }))
        }
        Outcome::ApprovalRefused { .. } | Outcome::ApprovalRecorded => {
            if evaluation.decision != removals_alone {
                return Err(format!(
                    "an approval write: the policy decides {:?}, its removals alone {removals_alone:?}",
                    evaluation.decision
                ));
            }
            Ok(Some(Agreed::Decided {
                allowed: !evaluation.denied,
                verdict: reviewed.verdict(),
            }))
        }
        _ => Ok(None),
    }
}

// ---------------------------------------------------------------------------
// The case files

/// The case files whose decision the policy cannot express: none decides a
/// request, the webhook answers 400.
const NOT_EXPRESSIBLE: &[&str] = &[
    "raw-admissionreview-response-instead-of-request-400.json",
    "raw-admissionreview-without-request-400.json",
    "raw-json-array-400.json",
    "raw-not-json-400.json",
    "raw-update-without-oldobject-400.json",
];

#[test]
fn the_policy_decides_every_case_file_as_the_webhook_does() {
    let mut failures = Vec::new();
    let mut excluded = Vec::new();
    let mut agreed = 0;
    for (folder, file) in [("cases", "policy.yaml"), ("cases-warn", "policy-warn.yaml")] {
        let policy = fixture_policy(file);
        let vap = Vap::export(&policy);
        for path in json_files(&crate_root().join("tests/fixtures").join(folder)) {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let expect_allowed = case.pointer("/expect/allowed").and_then(Value::as_bool);
            let outcome = match review_in(&case) {
                Some(review) => compare(&vap, &policy, &review),
                None => Ok(Agreed::Undecidable("not JSON".into())),
            };
            match outcome {
                Ok(Agreed::Decided { allowed, .. }) => {
                    agreed += 1;
                    if expect_allowed.is_some_and(|want| want != allowed) {
                        failures.push(format!("{folder}/{name}: the case file expects the other"));
                    }
                    if NOT_EXPRESSIBLE.contains(&name.as_str()) {
                        failures.push(format!("{folder}/{name}: decided, yet listed"));
                    }
                }
                Ok(Agreed::Undecidable(why)) => {
                    if !NOT_EXPRESSIBLE.contains(&name.as_str()) {
                        failures.push(format!("{folder}/{name}: not listed, but {why}"));
                    }
                    excluded.push(format!("{folder}/{name} ({why})"));
                }
                Err(e) => failures.push(format!("{folder}/{name}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(excluded.len(), NOT_EXPRESSIBLE.len());
    assert!(agreed >= 70, "only {agreed} case files decided");
    println!("{agreed} case files: the policy and the webhook decide each the same");
    for e in &excluded {
        println!("  not expressible (no decision to compare): {e}");
    }
}

// ---------------------------------------------------------------------------
// Reviews of our own

const SA: &str = "system:serviceaccount:";
const OVERRIDE: &str = "finalizer-guard.io/override";

/// An UPDATE by `user` of a pod in team-a being deleted, removing `old` minus `new`.
fn update(user: &str, old: &[&str], new: &[&str]) -> ReviewBuilder {
    ReviewBuilder::pod_update(user).finalizers(json!(old), json!(new))
}

fn namespace_finalize(user: &str, old: &[&str], new: &[&str]) -> ReviewBuilder {
    ReviewBuilder::pod_update(user)
        .resource("", "v1", "namespaces", "Namespace")
        .subresource("finalize")
        .name("team-a")
        .edit_old_object(|o| o["spec"] = json!({"finalizers": old}))
        .edit_object(|o| o["spec"] = json!({"finalizers": new}))
}

fn table() -> Vec<(String, ReviewBuilder)> {
    let mut cases: Vec<(String, ReviewBuilder)> = Vec::new();
    let mut add = |name: &str, review: ReviewBuilder| cases.push((name.to_string(), review));
    // Every built-in controller, under each of its usernames, and
    // kube-controller-manager, removing each of its finalizers; and another's.
    for controller in BUILTIN_CONTROLLERS {
        for user in controller
            .usernames
            .iter()
            .chain([&KUBE_CONTROLLER_MANAGER])
        {
            for finalizer in controller.finalizers {
                let review = match controller.field {
                    FinalizerField::Metadata => {
                        update(user, &[finalizer, "keep.io/x"], &["keep.io/x"])
                    }
                    FinalizerField::Spec => namespace_finalize(user, &[finalizer], &[]),
                };
                add(
                    &format!("{} ({user}) removes {finalizer}", controller.name),
                    review,
                );
            }
            add(
                &format!("{} ({user}) removes example.com/cleanup", controller.name),
                update(user, &["example.com/cleanup"], &[]),
            );
        }
    }
    for spoof in [
        "system:serviceaccount:kube-system:generic-garbage-collector-x",
        "system:serviceaccount:default:generic-garbage-collector",
        "System:Kube-Controller-Manager",
        "system:kube-controller-manager ",
        "",
    ] {
        add(
            &format!("{spoof:?} removes foregroundDeletion"),
            update(spoof, &["foregroundDeletion"], &[]),
        );
    }
    add(
        "spoofed namespace controller finalizes",
        namespace_finalize(
            &format!("{SA}default:namespace-controller"),
            &["kubernetes"],
            &[],
        ),
    );
    add(
        "the namespace controller removes a metadata kubernetes finalizer",
        update(
            &format!("{SA}kube-system:namespace-controller"),
            &["kubernetes"],
            &[],
        ),
    );

    // Rules: users, groups, service accounts, scopes, prefixes.
    let alice = "alice@example.com";
    add(
        "a rule's user",
        update(alice, &["example.com/cleanup"], &[]),
    );
    add(
        "a rule's user, another finalizer too",
        update(alice, &["example.com/cleanup", "example.com/other"], &[]),
    );
    add(
        "a rule's group, any finalizer",
        update("erin", &["anything.io/x", "y"], &[])
            .groups(&["system:authenticated", "platform-admins"]),
    );
    add(
        "a group that is not the rule's",
        update("erin", &["anything.io/x"], &[]).groups(&["platform-admins-readonly"]),
    );
    add(
        "a prefix",
        update(
            &format!("{SA}cert-manager:cert-manager"),
            &["cert-manager.io/certificate-cleanup"],
            &[],
        ),
    );
    add(
        "outside a prefix",
        update(
            &format!("{SA}cert-manager:cert-manager"),
            &["acme.cert-manager.io/finalizer"],
            &[],
        ),
    );
    add(
        "a prefix is not the name without its slash",
        update(
            &format!("{SA}cert-manager:cert-manager"),
            &["cert-manager.io"],
            &[],
        ),
    );
    let db = format!("{SA}team-a:db-operator");
    add(
        "a namespace scope",
        update(&db, &["db.example.com/backup"], &[]),
    );
    add(
        "outside the namespace scope",
        update(&db, &["db.example.com/backup"], &[]).namespace(Some("team-b")),
    );
    add(
        "a namespace scope, a cluster-scoped object",
        update(&db, &["db.example.com/backup"], &[])
            .namespace(None)
            .resource("", "v1", "persistentvolumes", "PersistentVolume"),
    );
    add(
        "a namespace scope, the Namespace itself",
        update(&db, &["db.example.com/backup"], &[])
            .namespace(Some("team-a"))
            .resource("", "v1", "namespaces", "Namespace")
            .name("team-a"),
    );
    let widgets = format!("{SA}widgets-system:widget-operator");
    add(
        "a resource scope",
        update(&widgets, &["widgets.example.com/cleanup"], &[]).resource(
            "example.com",
            "v1",
            "widgets",
            "Widget",
        ),
    );
    add(
        "a resource scope, another group",
        update(&widgets, &["widgets.example.com/cleanup"], &[]).resource(
            "legacy.example.com",
            "v1",
            "widgets",
            "Widget",
        ),
    );
    add(
        "a resource scope, a core resource",
        update(&widgets, &["widgets.example.com/cleanup"], &[]),
    );
    add(
        "a resource scope, a subresource of it",
        update(&widgets, &["widgets.example.com/cleanup"], &[])
            .resource("example.com", "v1", "widgets", "Widget")
            .subresource("status"),
    );
    let csi = format!("{SA}kube-system:csi-attacher");
    add(
        "a core resource scope",
        update(&csi, &["external-attacher/csi-x"], &[])
            .namespace(None)
            .resource("", "v1", "persistentvolumes", "PersistentVolume"),
    );
    add(
        "a grouped resource scope",
        update(&csi, &["external-attacher/csi-x"], &[])
            .namespace(None)
            .resource(
                "storage.k8s.io",
                "v1",
                "volumeattachments",
                "VolumeAttachment",
            ),
    );

    // What is removed.
    add(
        "nothing removed, reordered",
        update("bob", &["a.io/x", "b.io/y"], &["b.io/y", "a.io/x"]),
    );
    add(
        "nothing removed, one added",
        update("bob", &["a.io/x"], &["a.io/x", "b.io/y"]),
    );
    add(
        "nothing removed, duplicates collapsed",
        update("bob", &["a.io/x", "a.io/x"], &["a.io/x"]),
    );
    add(
        "nothing removed, unchanged",
        update("bob", &["a.io/x"], &["a.io/x"]),
    );
    add(
        "one swapped for another",
        update("bob", &["a.io/x"], &["b.io/y"]),
    );
    add(
        "a duplicate removed",
        update("bob", &["a.io/x", "b.io/y", "a.io/x"], &["b.io/y"]),
    );
    add(
        "finalizers null",
        update("bob", &["a.io/x"], &[]).finalizers(json!(["a.io/x"]), Value::Null),
    );
    add(
        "finalizers absent",
        update("bob", &["a.io/x"], &[]).edit_object(|o| {
            o["metadata"].as_object_mut().unwrap().remove("finalizers");
        }),
    );
    add(
        "old finalizers null",
        update("bob", &[], &[]).finalizers(Value::Null, json!(["a.io/x"])),
    );
    add(
        "a status update removing one",
        update("bob", &["a.io/x"], &[]).subresource("status"),
    );
    add("a scale update", update("bob", &[], &[]).resource("apps", "v1", "deployments", "Deployment").subresource("scale").edit_both(|o| *o = json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "web"}, "spec": {"replicas": 2}})));
    add(
        "a namespace finalized by a person",
        namespace_finalize("bob", &["kubernetes"], &[]),
    );
    add(
        "a namespace finalized, spec.finalizers null",
        namespace_finalize("bob", &["kubernetes"], &[])
            .edit_object(|o| o["spec"]["finalizers"] = Value::Null),
    );
    add(
        "a namespace finalize keeping spec.finalizers",
        namespace_finalize("bob", &["kubernetes"], &["kubernetes"]),
    );
    add(
        "a namespace finalize removing a metadata finalizer",
        namespace_finalize("bob", &["kubernetes"], &["kubernetes"])
            .finalizers(json!(["a.io/x"]), json!([])),
    );
    add(
        "a namespace's spec.finalizers, not through finalize",
        namespace_finalize("bob", &["kubernetes"], &[]).subresource(""),
    );
    add(
        "a group admin finalizes a namespace",
        namespace_finalize("erin", &["kubernetes", "other.io/x"], &[]).groups(&["platform-admins"]),
    );
    add(
        "CREATE",
        update("bob", &[], &["a.io/x"])
            .operation("CREATE")
            .old_object(None),
    );
    add(
        "DELETE",
        update("bob", &["a.io/x"], &[]).operation("DELETE"),
    );
    add("a dry run", update("bob", &["a.io/x"], &[]).dry_run(true));

    // Overrides.
    for (label, value) in [
        ("valid", "node-lost: INC-4711 server-1 powered off"),
        ("no space", "node-lost:INC-1"),
        ("spaces around", "  controller-unavailable :  x: y "),
        ("no colon", "node-lost"),
        ("empty", ""),
        ("empty reason", ": detail"),
        ("empty detail", "node-lost:"),
        ("blank detail", "node-lost:   "),
        ("zero-width space", "node-lost: \u{200B}"),
        ("Hangul fillers", "node-lost: \u{3164}\u{2800}"),
        ("a lone combining mark", "node-lost: \u{301}"),
        ("an ideographic space", "node-lost: \u{3000}"),
        ("a newline", "node-lost: INC-1\nmode: warn"),
        ("a carriage return", "node-lost: INC-1\r"),
        ("a tab", "node-lost:\tINC-1"),
        ("a bidirectional override", "node-lost: INC-\u{202E}1"),
        ("a line separator", "node-lost: INC-1\u{2028}"),
        ("DEL", "node-lost: a\u{7F}"),
        ("a private-use character", "node-lost: a\u{E000}"),
        ("a soft hyphen", "node-lost: a\u{AD}b"),
        ("a no-break space around", "\u{A0}node-lost\u{A0}: x"),
        ("another script", "node-lost: 障害 INC-1"),
        ("an emoji", "node-lost: 🔥"),
        ("punctuation only", "node-lost: #"),
        ("a capitalised reason", "Node-Lost: x"),
        ("an unapproved reason", "because: x"),
        ("a reason with a space", "node lost: x"),
        ("a combining mark after a letter", "node-lost: e\u{301}"),
        ("a quote in the reason", "no\"de: x"),
    ] {
        add(
            &format!("override, {label}"),
            update("bob", &["example.com/cleanup"], &[]).annotate(OVERRIDE, value),
        );
    }
    add(
        "an override on a live object",
        update("bob", &["example.com/cleanup"], &[])
            .annotate(OVERRIDE, "node-lost: x")
            .live(),
    );
    add(
        "an override only on the old object",
        update("bob", &["example.com/cleanup"], &[]).annotate_old(OVERRIDE, "node-lost: x"),
    );
    add(
        "an override, partly authorized",
        update(alice, &["example.com/cleanup", "b.io/y"], &[]).annotate(OVERRIDE, "node-lost: x"),
    );
    add(
        "an override on a namespace finalize",
        namespace_finalize("bob", &["kubernetes"], &[])
            .annotate(OVERRIDE, "apiservice-unavailable: v1beta1.metrics gone"),
    );
    add(
        "an override under another key",
        update("bob", &["example.com/cleanup"], &[])
            .annotate("example.com/override", "node-lost: x"),
    );
    add(
        "a user whose name holds a newline",
        update("bob\nadmin", &["example.com/cleanup"], &[]),
    );
    cases
}

#[test]
fn the_policy_decides_our_table_as_the_webhook_does() {
    let mut failures = Vec::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let cases = table();
    for file in ["policy.yaml", "policy-warn.yaml"] {
        let policy = fixture_policy(file);
        let vap = Vap::export(&policy);
        for (name, review) in &cases {
            match compare(&vap, &policy, &review.to_value()) {
                Ok(Agreed::Decided { verdict, .. }) => {
                    *counts.entry(format!("{file}: {verdict}")).or_default() += 1;
                }
                Ok(Agreed::Undecidable(e)) => failures.push(format!("{file}: {name}: {e}")),
                Err(e) => failures.push(format!("{file}: {name}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The table reaches every verdict of both modes.
    for verdict in [
        "denied",
        "would-deny",
        "override",
        "authorized",
        "nothing-removed",
        "not-judged",
    ] {
        assert!(
            counts.keys().any(|k| k.ends_with(verdict)),
            "no {verdict}: {counts:?}"
        );
    }
    println!(
        "{} reviews, each under both policies: {counts:?}",
        cases.len()
    );
}

/// Other policies: builtinIdentities, no built-in controllers, no
/// requireDeletion, another annotation and reasons, names that need escaping.
fn other_policies() -> Vec<(&'static str, String)> {
    vec![
        (
            "builtinIdentities",
            "rules: []\nbuiltinIdentities:\n  - controller: service\n    users: [\"eks:cloud-controller-manager\"]\n  - controller: kube-controller-manager\n    serviceAccounts: [\"kube-system:my-kcm\"]\n".into(),
        ),
        ("no built-in controllers", "mode: warn\nbuiltinControllers: false\n".into()),
        (
            "no requireDeletion, other annotation and reasons",
            "override:\n  annotation: example.com/break-glass\n  reasons: [incident, node-lost]\n  requireDeletion: false\nrules:\n  - finalizers: ['*']\n    users: [alice@example.com]\n    resources: [namespaces]\n".into(),
        ),
        (
            "override rules per finalizer",
            "override:\n  reasons: [node-lost, controller-unavailable, incident]\n  finalizers:\n    - finalizers: [kubernetes.io/pvc-protection, \"a.io/*\"]\n      reasons: [node-lost]\n    - finalizers: [\"b.io/*\", kubernetes]\n      never: true\n    - finalizers: [\"it's/*\"]\n      reasons: [incident, controller-unavailable]\nrules:\n  - finalizers: [a.io/y]\n    users: [alice]\n".into(),
        ),
        (
            "two-person override",
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n  finalizers:\n    - finalizers: [\"a.io/*\"]\n      approval: required\n    - finalizers: [b.io/x]\n      never: true\nrules:\n  - finalizers: [a.io/y]\n    users: [alice]\n".into(),
        ),
        (
            "names that need escaping",
            "rules:\n  - name: \"quote ' and backslash \\\\ and newline\"\n    finalizers: [\"example.com/it's\", \"back\\\\slash/*\", \"\\u00e9t\\u00e9.io/x\"]\n    users: [\"bob\", \"o'brien\", \"\\u202ebidi\"]\n    groups: [\"g\\\"1\", \"\\U0001F525\"]\n    namespaces: [\"team-a\"]\n".into(),
        ),
    ]
}

#[test]
fn other_policies_decide_as_the_webhook_does() {
    let reviews: Vec<(String, ReviewBuilder)> = table()
        .into_iter()
        .chain([
            (
                "eks ccm removes lb cleanup".to_string(),
                update(
                    "eks:cloud-controller-manager",
                    &["service.kubernetes.io/load-balancer-cleanup", "orphan"],
                    &[],
                ),
            ),
            (
                "my-kcm removes orphan".to_string(),
                update(
                    &format!("{SA}kube-system:my-kcm"),
                    &["orphan", "kubernetes.io/pvc-protection"],
                    &[],
                ),
            ),
            (
                "my-kcm finalizes a namespace".to_string(),
                namespace_finalize(&format!("{SA}kube-system:my-kcm"), &["kubernetes"], &[]),
            ),
            (
                "o'brien removes it's".to_string(),
                update("o'brien", &["example.com/it's"], &[]),
            ),
            (
                "a bidi user".to_string(),
                update("\u{202e}bidi", &["back\\slash/x"], &[]),
            ),
            (
                "a quoted group".to_string(),
                update("x", &["\u{e9}t\u{e9}.io/x"], &[]).groups(&["g\"1"]),
            ),
            (
                "an emoji group".to_string(),
                update("x", &["example.com/it's"], &[]).groups(&["\u{1F525}"]),
            ),
            (
                "one of two removed finalizers accepts node-lost".to_string(),
                update("bob", &["a.io/x", "b.io/x"], &[]).annotate(OVERRIDE, "node-lost: INC-1"),
            ),
            (
                "both accept node-lost".to_string(),
                update(
                    "bob",
                    &["a.io/x", "kubernetes.io/pvc-protection"],
                    &["c.io/x"],
                )
                .annotate(OVERRIDE, "node-lost: INC-1"),
            ),
            (
                "pvc-protection with controller-unavailable".to_string(),
                update("bob", &["kubernetes.io/pvc-protection"], &[])
                    .annotate(OVERRIDE, "controller-unavailable: INC-1"),
            ),
            (
                "a rule covers one, the other takes the reason".to_string(),
                update("alice", &["a.io/y", "a.io/x"], &[]).annotate(OVERRIDE, "node-lost: INC-1"),
            ),
            (
                "a rule covers one, the other never".to_string(),
                update("alice", &["a.io/y", "b.io/x"], &[]).annotate(OVERRIDE, "node-lost: INC-1"),
            ),
            (
                "an it's prefix with incident".to_string(),
                update("bob", &["it's/x"], &[]).annotate(OVERRIDE, "incident: INC-1"),
            ),
            (
                "a break-glass".to_string(),
                update("bob", &["a.io/x"], &[])
                    .annotate("example.com/break-glass", "incident: INC-9")
                    .live(),
            ),
        ])
        .collect();
    let mut failures = Vec::new();
    for (label, yaml) in other_policies() {
        let policy = Policy::from_yaml(&yaml).unwrap_or_else(|e| panic!("{label}: {e}"));
        let vap = Vap::export(&policy);
        let mut decided = BTreeMap::<&str, usize>::new();
        for (name, review) in &reviews {
            match compare(&vap, &policy, &review.to_value()) {
                Ok(Agreed::Decided { verdict, .. }) => {
                    *decided.entry(verdict.as_str()).or_default() += 1
                }
                Ok(Agreed::Undecidable(e)) | Err(e) => {
                    failures.push(format!("{label}: {name}: {e}"))
                }
            }
        }
        println!("{label}: {decided:?}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn longer_finalizer_lists_are_refused_not_judged() {
    let policy = fixture_policy("policy.yaml");
    let vap = Vap::export(&policy);
    let names =
        |n: usize| -> Vec<String> { (0..n).map(|i| format!("example.com/f-{i:04}")).collect() };
    let gc = format!("{SA}kube-system:generic-garbage-collector");
    for (n, refused) in [
        (vap::MAX_FINALIZERS, false),
        (vap::MAX_FINALIZERS + 1, true),
    ] {
        // The garbage collector removes its own finalizer from a long list.
        let mut old = names(n - 1);
        old.push("foregroundDeletion".into());
        let review = ReviewBuilder::pod_update(&gc)
            .finalizers(json!(old), json!(names(n - 1)))
            .to_value();
        let body = serde_json::to_vec(&review).unwrap();
        assert_eq!(
            admission::review(&policy, &body).unwrap().verdict(),
            Verdict::Authorized
        );
        if !refused {
            assert_eq!(
                compare(&vap, &policy, &review),
                Ok(Agreed::Decided {
                    allowed: true,
                    verdict: Verdict::Authorized
                })
            );
            continue;
        }
        let evaluation = vap.evaluate(&review).unwrap();
        assert!(evaluation.denied, "{n}: {evaluation:?}");
        let message = evaluation.message.unwrap();
        assert!(
            message.contains(&format!("more than {} finalizers", vap::MAX_FINALIZERS)),
            "{message}"
        );
        assert_eq!(
            evaluation.annotations["too-many-finalizers"],
            format!("more than {}", vap::MAX_FINALIZERS)
        );
        // A write that leaves the long list as it is: not judged at all.
        let unchanged = ReviewBuilder::pod_update("bob")
            .finalizers(json!(old), json!(old))
            .to_value();
        assert!(!vap.evaluate(&unchanged).unwrap().matched);
    }
}

#[test]
fn what_cannot_be_expressed_is_refused_by_name() {
    // The two-person override: exported, taking no override (the webhook
    // alone verifies an approval), so it never allows what the webhook denies.
    let two_person = "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n";
    let policy = Policy::from_yaml(two_person).unwrap();
    let yaml = vap::export_yaml(&policy).unwrap();
    assert!(yaml.contains("only the webhook verifies"), "{yaml}");

    // A policy serve refuses (it blocks a built-in controller in enforce mode) is refused too.
    let blocking = Policy::from_yaml("builtinControllers: false\n").unwrap();
    assert!(matches!(
        vap::export(&blocking),
        Err(ExportError::BlocksBuiltinControllers(_))
    ));
    // In warn mode it blocks nothing: exported.
    assert!(
        vap::export(&Policy::from_yaml("mode: warn\nbuiltinControllers: false\n").unwrap()).is_ok()
    );
}

/// One-name rules: all naming one group, or each its own user.
fn policy_of(rules: usize, shared_group: bool) -> Policy {
    let mut yaml = String::from("rules:\n");
    for r in 0..rules {
        let who = if shared_group {
            "groups: [g-all]".to_string()
        } else {
            format!("users: [u{r}]")
        };
        yaml.push_str(&format!(
            "  - finalizers: [t{r}.example.com/f]\n    {who}\n"
        ));
    }
    Policy::from_yaml(&yaml).unwrap()
}

#[test]
fn what_kube_apiserver_would_refuse_or_fail_on_is_refused() {
    // The cost: rules that can all cover one requester.
    let cost = vap::estimated_cost(&policy_of(279, true));
    assert_eq!(cost.rules, 279);
    assert!(cost.cost <= vap::PER_CALL_COST_LIMIT, "{cost:?}");
    assert!(vap::export(&policy_of(279, true)).is_ok());
    let Err(ExportError::TooCostly { rules: 280, .. }) = vap::export(&policy_of(280, true)) else {
        panic!("280 rules covering one requester are exported")
    };
    // Rules for different users never cover one requester together.
    assert_eq!(vap::estimated_cost(&policy_of(700, false)).rules, 1);
    // The size of one expression.
    assert!(vap::export(&policy_of(700, false)).is_ok());
    let Err(ExportError::TooLarge { what, size, limit }) = vap::export(&policy_of(2000, false))
    else {
        panic!("2000 rules are exported")
    };
    assert_eq!(
        (what.as_str(), limit),
        ("variable rules", vap::MAX_EXPRESSION_CODE_POINTS)
    );
    assert!(size > limit);
    // The YAML says the estimate.
    let yaml = vap::export_yaml(&policy_of(279, true)).unwrap();
    assert!(
        yaml.contains(&format!(
            "at most about {}\n",
            vap::estimated_cost(&policy_of(279, true)).cost
        )),
        "{yaml}"
    );
}

#[test]
fn the_mode_chooses_the_binding_actions() {
    for (mode, actions) in [
        (Mode::Enforce, ["Deny", "Audit"]),
        (Mode::Warn, ["Warn", "Audit"]),
    ] {
        let mut policy = fixture_policy("policy.yaml");
        policy.mode = mode;
        let vap = Vap::export(&policy);
        assert_eq!(vap.actions, actions);
    }
}

#[test]
fn an_evaluation_error_is_reported_not_swallowed() {
    // A condition that errors would be a refused write; make sure the
    // harness sees one rather than reading it as "not matched".
    let yaml = vap::export_yaml(&fixture_policy("policy.yaml")).unwrap();
    let mut vap = Vap::read(&yaml);
    vap.conditions = vec![(
        "broken".into(),
        vap.env
            .compile("object.metadata.finalizers.exists(f, true)")
            .unwrap(),
    )];
    let review = update("bob", &[], &[])
        .edit_object(|o| o["metadata"]["finalizers"] = Value::Null)
        .to_value();
    assert!(vap.evaluate(&review).is_err());
}

// ---------------------------------------------------------------------------
// Random reviews under random policies

/// Finalizer names the random reviews and policies draw from.
const FINALIZERS: &[&str] = &[
    "a.io/x",
    "a.io/y",
    "b.io/x",
    "kubernetes",
    "foregroundDeletion",
    "orphan",
    "kubernetes.io/pvc-protection",
    "batch.kubernetes.io/job-tracking",
];
const PATTERNS: &[&str] = &[
    "a.io/x",
    "a.io/*",
    "b.io/x",
    "*",
    "kubernetes",
    "orphan",
    "kubernetes.io/*",
];
const USERS: &[&str] = &[
    "alice",
    "bob",
    "system:serviceaccount:team-a:op",
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:serviceaccount:kube-system:namespace-controller",
    "eks:ccm",
];
const GROUPS: &[&str] = &["g1", "g2", "system:authenticated"];
const NAMESPACES: &[&str] = &["team-a", "team-b"];
const RESOURCES: &[(&str, &str, bool)] = &[
    ("", "pods", true),
    ("example.com", "widgets", true),
    ("", "namespaces", false),
    ("", "persistentvolumes", false),
];
const OVERRIDES: &[&str] = &[
    "node-lost: INC-1",
    "node-lost:",
    "node-lost: \u{3164}",
    "lost: x",
    "node-lost",
    "node-lost: a\nb",
    "incident: x",
    " incident :\u{A0}é ",
    "node-lost: \u{200D}x",
    "node-lost: \u{301}",
];

fn subset(items: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(items, 0..=items.len())
}

fn yaml_list(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap()
}

fn rule_strategy() -> impl Strategy<Value = String> {
    (
        proptest::sample::subsequence(PATTERNS, 1..=3),
        subset(&USERS[..3]),
        subset(&GROUPS[..2]),
        proptest::option::of(proptest::sample::subsequence(NAMESPACES, 1..=2)),
        proptest::option::of(proptest::sample::subsequence(
            &[
                "pods",
                "widgets.example.com",
                "namespaces",
                "persistentvolumes",
            ][..],
            1..=2,
        )),
    )
        .prop_map(|(patterns, users, groups, namespaces, resources)| {
            let (users, groups) = if users.is_empty() && groups.is_empty() {
                (vec!["alice"], groups)
            } else {
                (users, groups)
            };
            let mut rule = format!(
                "  - finalizers: {}\n    users: {}\n    groups: {}\n",
                yaml_list(&patterns),
                yaml_list(&users),
                yaml_list(&groups)
            );
            if let Some(ns) = namespaces {
                rule.push_str(&format!("    namespaces: {}\n", yaml_list(&ns)));
            }
            if let Some(r) = resources {
                rule.push_str(&format!("    resources: {}\n", yaml_list(&r)));
            }
            rule
        })
}

/// Patterns of `override.finalizers` entries, no two of which can match one finalizer.
const ENTRY_PATTERNS: &[&str] = &[
    "a.io/x",
    "b.io/*",
    "kubernetes.io/pvc-protection",
    "kubernetes",
];
/// What an entry says.
const ENTRY_SETTINGS: &[&str] = &[
    "reasons: [node-lost]",
    "reasons: [incident]",
    "reasons: [node-lost, incident]",
    "never: true",
];

/// `override.finalizers`, and `override.approval` (then some entries say `approval: required`).
fn entries_strategy() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(
            proptest::option::of(proptest::sample::select(ENTRY_SETTINGS)),
            ENTRY_PATTERNS.len(),
        ),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(settings, approval)| {
            let mut yaml = String::new();
            if approval {
                yaml.push_str("  approval:\n    users: [alice]\n    maxAge: 1h\n");
            }
            let entries: Vec<String> = ENTRY_PATTERNS
                .iter()
                .zip(settings)
                .filter_map(|(pattern, setting)| {
                    let setting = setting?;
                    let extra = if approval && !setting.starts_with("never") {
                        "\n      approval: required"
                    } else {
                        ""
                    };
                    Some(format!(
                        "    - finalizers: [{}]\n      {setting}{extra}\n",
                        yaml_list(&[pattern]).trim_matches(|c| c == '[' || c == ']')
                    ))
                })
                .collect();
            if !entries.is_empty() {
                yaml.push_str("  finalizers:\n");
                for e in entries {
                    yaml.push_str(&e);
                }
            }
            yaml
        })
}

fn policy_strategy() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(rule_strategy(), 0..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        entries_strategy(),
    )
        .prop_map(|(rules, warn, builtin, identities, require_deletion, entries)| {
            let mut yaml = format!(
                "mode: {}\nbuiltinControllers: {builtin}\noverride:\n  reasons: [node-lost, incident]\n  requireDeletion: {require_deletion}\n{entries}",
                if warn { "warn" } else { "enforce" }
            );
            if identities {
                yaml.push_str("builtinIdentities:\n  - controller: garbage-collector\n    users: [eks:ccm]\n");
            }
            yaml.push_str("rules:\n");
            if rules.is_empty() {
                yaml = yaml.replace("rules:\n", "rules: []\n");
            }
            for rule in rules {
                yaml.push_str(&rule);
            }
            yaml
        })
}

fn review_strategy() -> impl Strategy<Value = Value> {
    let list = || proptest::collection::vec(proptest::sample::select(FINALIZERS), 0..4);
    (
        proptest::sample::select(USERS),
        subset(GROUPS),
        proptest::sample::select(RESOURCES),
        any::<bool>(),
        proptest::sample::select(NAMESPACES),
        (list(), list(), list(), list()),
        proptest::option::of(proptest::sample::select(OVERRIDES)),
        any::<bool>(),
    )
        .prop_map(
            |(
                user,
                groups,
                (group, resource, namespaced),
                finalize,
                ns,
                (old, new, spec_old, spec_new),
                value,
                deleting,
            )| {
                let mut review = ReviewBuilder::pod_update(user)
                    .groups(&groups)
                    .resource(group, "v1", resource, "Thing")
                    .finalizers(json!(old), json!(new));
                review = review.namespace(namespaced.then_some(ns));
                if resource == "namespaces" {
                    review = review
                        .namespace(Some("legacy"))
                        .name("legacy")
                        .edit_old_object(|o| o["spec"] = json!({"finalizers": spec_old}))
                        .edit_object(|o| o["spec"] = json!({"finalizers": spec_new}));
                    if finalize {
                        review = review.subresource("finalize");
                    }
                }
                if let Some(value) = value {
                    review = review.annotate(OVERRIDE, value);
                }
                if !deleting {
                    review = review.live();
                }
                review.to_value()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_reviews_under_random_policies(policy in policy_strategy(), reviews in proptest::collection::vec(review_strategy(), 8)) {
        let policy = Policy::from_yaml(&policy).unwrap();
        let vap = match vap::export(&policy) {
            Ok(_) => Vap::export(&policy),
            // What serve refuses is refused, and decided by no one.
            Err(ExportError::BlocksBuiltinControllers(_)) => return Ok(()),
            Err(e) => panic!("{e}"),
        };
        for review in &reviews {
            let agreed = compare(&vap, &policy, review);
            prop_assert!(matches!(agreed, Ok(Agreed::Decided { .. })), "{agreed:?}\npolicy {policy:?}\nreview {review}");
        }
    }
}

// ---------------------------------------------------------------------------
// The command

fn export_command(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(["policy", "export"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_command_prints_the_yaml_and_exits_as_documented() {
    let fixtures = crate_root().join("tests/fixtures");
    let out = export_command(&["--vap", fixtures.join("policy.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        yaml,
        vap::export_yaml(&fixture_policy("policy.yaml")).unwrap()
    );
    Vap::read(&yaml);

    // Not representable: exit 1, the reason named.
    let dir = tempfile::tempdir().unwrap();
    let blocking = dir.path().join("blocking.yaml");
    std::fs::write(&blocking, "builtinControllers: false\n").unwrap();
    let out = export_command(&["--vap", blocking.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("blocks Kubernetes' own controllers"),
        "{stderr}"
    );
    // The two-person override: exported, saying what it leaves to the webhook.
    let two_person = dir.path().join("two-person.yaml");
    std::fs::write(
        &two_person,
        "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n",
    )
    .unwrap();
    let out = export_command(&["--vap", two_person.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("#   override.approval: every override needs")
    );

    // Not a valid policy: exit 1, naming the field.
    let invalid = dir.path().join("invalid.yaml");
    std::fs::write(&invalid, "rules:\n  - finalizers: [a]\n    usrs: [b]\n").unwrap();
    let out = export_command(&["--vap", invalid.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("usrs"));

    // Not readable: exit 2. Without --vap: a usage error, exit 2.
    let out = export_command(&["--vap", dir.path().join("absent.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = export_command(&[fixtures.join("policy.yaml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
