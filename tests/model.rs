//! The decision against a model of CONTRACT.md's "Decision", on random input.
//!
//! [`model`] is the contract's six steps written out plainly, sharing no code
//! with `src/policy/`. Random policies, finalizer lists (from a small alphabet,
//! so overlaps, duplicates and reorderings are common), requesters,
//! namespaces, resources, override annotations and operations are built into
//! AdmissionReviews and decided by the wire layer, [`review_at`], so parsing is
//! covered too; the answer must agree with the model.
//!
//! 1024 cases by default; `PROPTEST_CASES=100000 cargo test --test model`
//! for a longer run.

use std::collections::BTreeSet;

use finalizer_guard::admission::{ReviewBuilder, Reviewed, review_at};
use finalizer_guard::policy::Policy;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use serde_json::{Map, Value, json};

// --- The model ------------------------------------------------------------

const OVERRIDE_KEY: &str = "finalizer-guard.io/override";
const REASONS: [&str; 4] = [
    "node-lost",
    "controller-unavailable",
    "controller-uninstalled",
    "apiservice-unavailable",
];
const METADATA: &str = "metadata.finalizers";
const SPEC: &str = "spec.finalizers";
const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

/// The part of the built-in controller table the alphabets below can reach:
/// (username, finalizer, field). `system:kube-controller-manager` owns them all.
const BUILTIN: &[(&str, &str, &str)] = &[
    (GC, "foregroundDeletion", METADATA),
    (GC, "orphan", METADATA),
    (
        "system:serviceaccount:kube-system:pvc-protection-controller",
        "kubernetes.io/pvc-protection",
        METADATA,
    ),
    (
        "system:serviceaccount:kube-system:pv-protection-controller",
        "kubernetes.io/pv-protection",
        METADATA,
    ),
    (
        "system:serviceaccount:kube-system:namespace-controller",
        "kubernetes",
        SPEC,
    ),
];

#[derive(Debug, Clone)]
struct ModelPolicy {
    warn: bool,
    builtin_controllers: bool,
    rules: Vec<ModelRule>,
}

#[derive(Debug, Clone)]
struct ModelRule {
    /// Exact names, or a prefix ending in `*`.
    finalizers: Vec<&'static str>,
    users: Vec<&'static str>,
    groups: Vec<&'static str>,
    /// `NAMESPACE:NAME`.
    service_accounts: Vec<&'static str>,
    namespaces: Option<Vec<&'static str>>,
    /// `resource` or `resource.group`.
    resources: Option<Vec<&'static str>>,
}

/// One admission request, before it is written as an AdmissionReview.
#[derive(Debug, Clone)]
struct Request {
    operation: &'static str,
    v1beta1: bool,
    dry_run: bool,
    /// `None`: `userInfo` carries no username.
    username: Option<&'static str>,
    groups: Vec<&'static str>,
    namespace: Option<&'static str>,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    old: Vec<&'static str>,
    new: Vec<&'static str>,
    old_spec: Vec<&'static str>,
    new_spec: Vec<&'static str>,
    /// How each empty list is written: 0 absent, 1 `null`, 2 `[]`.
    empty_as: [u8; 4],
    /// (key, value) on `object` and on `oldObject`.
    annotation: Option<(&'static str, &'static str)>,
    old_annotation: Option<(&'static str, &'static str)>,
    /// `oldObject` has a `deletionTimestamp`.
    deleting: bool,
}

#[derive(Debug, PartialEq, Eq)]
struct Expected {
    allowed: bool,
    decision: &'static str,
    /// (finalizer, field) removed, and those of them nothing authorizes.
    removed: BTreeSet<(&'static str, &'static str)>,
    unauthorized: BTreeSet<(&'static str, &'static str)>,
    override_reason: Option<&'static str>,
}

/// CONTRACT.md, "Decision".
fn model(p: &ModelPolicy, r: &Request) -> Expected {
    let outcome = |allowed, decision| Expected {
        allowed,
        decision,
        removed: BTreeSet::new(),
        unauthorized: BTreeSet::new(),
        override_reason: None,
    };
    // 1. Only UPDATE is judged.
    if r.operation != "UPDATE" {
        return outcome(true, "not-judged");
    }
    // 2. Removed: in the old list, absent from the new; spec.finalizers through namespaces/finalize.
    let minus = |old: &[&'static str], new: &[&'static str], field| {
        old.iter()
            .filter(|f| !new.contains(f))
            .map(move |f| (*f, field))
            .collect::<Vec<_>>()
    };
    let mut removed: BTreeSet<_> = minus(&r.old, &r.new, METADATA).into_iter().collect();
    if r.group.is_empty() && r.resource == "namespaces" && r.subresource == "finalize" {
        removed.extend(minus(&r.old_spec, &r.new_spec, SPEC));
    }
    // 3. Nothing removed: allowed.
    if removed.is_empty() {
        return outcome(true, "nothing-removed");
    }
    // 4. Each removal authorized by a rule or the built-in controller table.
    let user = r.username.unwrap_or_default();
    let builtin = |f: &str, field: &str| {
        p.builtin_controllers
            && BUILTIN.iter().any(|&(u, bf, bfield)| {
                (u == user || user == KUBE_CONTROLLER_MANAGER) && bf == f && bfield == field
            })
    };
    let unauthorized: BTreeSet<_> = removed
        .iter()
        .copied()
        .filter(|&(f, field)| !builtin(f, field) && !p.rules.iter().any(|rule| covers(rule, r, f)))
        .collect();
    let mut expected = Expected {
        allowed: true,
        decision: "authorized",
        removed,
        unauthorized,
        override_reason: None,
    };
    if expected.unauthorized.is_empty() {
        return expected;
    }
    // 5. Otherwise an override on `object`: `REASON: DETAIL`, REASON approved, DETAIL not
    //    empty, on an object being deleted.
    let valid_override = r
        .annotation
        .filter(|_| r.deleting)
        .and_then(|(key, value)| {
            let (reason, detail) = value.split_once(':')?;
            let reason = REASONS.into_iter().find(|a| *a == reason.trim())?;
            (key == OVERRIDE_KEY && !detail.trim().is_empty()).then_some(reason)
        });
    if let Some(reason) = valid_override {
        expected.decision = "override";
        expected.override_reason = Some(reason);
        return expected;
    }
    // 6. Otherwise denied; in warn mode allowed, saying it would deny.
    (expected.allowed, expected.decision) = if p.warn {
        (true, "would-deny")
    } else {
        (false, "denied")
    };
    expected
}

/// Whether `rule` covers the requester, the object's namespace and resource, and `finalizer`.
fn covers(rule: &ModelRule, r: &Request, finalizer: &str) -> bool {
    let user = r.username.unwrap_or_default();
    let finalizer_ok = rule.finalizers.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => finalizer.starts_with(prefix),
        None => *p == finalizer,
    });
    let requester_ok = rule.users.contains(&user)
        || rule.groups.iter().any(|g| r.groups.contains(g))
        || rule
            .service_accounts
            .iter()
            .any(|sa| format!("system:serviceaccount:{sa}") == user);
    // A Namespace is cluster-scoped, although the apiserver sends its name as request.namespace.
    let namespace = match r.resource {
        "namespaces" if r.group.is_empty() => None,
        _ => r.namespace.filter(|ns| !ns.is_empty()),
    };
    let namespace_ok = rule
        .namespaces
        .as_ref()
        .is_none_or(|list| namespace.is_some_and(|ns| list.contains(&ns)));
    let qualified = match r.group {
        "" => r.resource.to_string(),
        group => format!("{}.{group}", r.resource),
    };
    let resource_ok = rule
        .resources
        .as_ref()
        .is_none_or(|list| list.contains(&qualified.as_str()));
    finalizer_ok && requester_ok && namespace_ok && resource_ok
}

// --- The alphabets --------------------------------------------------------

const FINALIZERS: &[&str] = &[
    "example.com/a",
    "example.com/b",
    "storage.example.com/x",
    "storage.example.com",
    "kubernetes.io/pv-protection",
    "kubernetes.io/pvc-protection",
    "foregroundDeletion",
    "orphan",
    "kubernetes",
];
const PATTERNS: &[&str] = &[
    "example.com/a",
    "example.com/*",
    "storage.example.com/*",
    "kubernetes.io/*",
    "orphan",
    "kubernetes",
    "*",
];
/// No built-in controller outside [`BUILTIN`], plus near misses of those inside.
const USERNAMES: &[&str] = &[
    "alice",
    "bob@example.com",
    "system:serviceaccount:ops:cleanup",
    "system:serviceaccount:other:cleanup",
    GC,
    "system:serviceaccount:kube-system:generic-garbage-collector-x",
    "system:serviceaccount:default:generic-garbage-collector",
    "system:serviceaccount:kube-system:pvc-protection-controller",
    "system:serviceaccount:kube-system:pv-protection-controller",
    "system:serviceaccount:kube-system:namespace-controller",
    KUBE_CONTROLLER_MANAGER,
    "",
];
const GROUPS: &[&str] = &[
    "platform-admins",
    "oncall",
    "system:authenticated",
    "system:serviceaccounts",
];
const NAMESPACES: &[&str] = &["team-a", "team-b", ""];
const RULE_GROUPS: &[&str] = &["platform-admins", "oncall"];
const RULE_USERS: &[&str] = &["alice", "bob@example.com", KUBE_CONTROLLER_MANAGER];
const RULE_SERVICE_ACCOUNTS: &[&str] = &["ops:cleanup", "kube-system:generic-garbage-collector"];
const RULE_NAMESPACES: &[&str] = &["team-a", "kube-system"];
const RULE_RESOURCES: &[&str] = &[
    "pods",
    "persistentvolumeclaims",
    "widgets.example.com",
    "namespaces",
];
/// (group, resource, subresource).
const RESOURCES: &[(&str, &str, &str)] = &[
    ("", "pods", ""),
    ("", "persistentvolumeclaims", ""),
    ("example.com", "widgets", ""),
    ("apps", "deployments", ""),
    ("", "namespaces", ""),
    ("", "namespaces", "finalize"),
    ("", "namespaces", "status"),
];
const OVERRIDE_VALUES: &[&str] = &[
    "node-lost: INC-4711 worker-3 powered off",
    "controller-uninstalled:x",
    " apiservice-unavailable :  y: z ",
    "node-lost: a:b",
    "bored: x",
    "Node-Lost: x",
    "node-lost:",
    "node-lost:   ",
    "node-lost",
    ": detail",
    "",
];

// --- The strategies -------------------------------------------------------

fn finalizers() -> impl Strategy<Value = Vec<&'static str>> {
    vec(select(FINALIZERS), 0..5)
}

/// Independent lists, or a new list made from the old one: some kept, in
/// another order, with duplicates and additions.
fn lists() -> impl Strategy<Value = (Vec<&'static str>, Vec<&'static str>)> {
    let derived = finalizers().prop_flat_map(|old| {
        let n = old.len();
        (
            Just(old.clone()),
            subsequence(old, 0..=n),
            vec(select(FINALIZERS), 0..2),
            any::<bool>(),
            vec(any::<u32>(), 16),
        )
            .prop_map(|(old, mut new, extra, duplicate, order)| {
                new.extend(extra);
                if duplicate && let Some(first) = new.first().copied() {
                    new.push(first);
                }
                let mut keyed: Vec<_> = new.into_iter().zip(order).collect();
                keyed.sort_by_key(|&(_, key)| key);
                (old, keyed.into_iter().map(|(f, _)| f).collect())
            })
    });
    prop_oneof![(finalizers(), finalizers()), derived]
}

fn scope(alphabet: &'static [&'static str]) -> impl Strategy<Value = Option<Vec<&'static str>>> {
    proptest::option::of(subsequence(alphabet, 1..=2))
}

fn rule() -> impl Strategy<Value = ModelRule> {
    (
        subsequence(PATTERNS, 1..=2),
        subsequence(RULE_USERS, 0..=1),
        subsequence(RULE_GROUPS, 0..=1),
        subsequence(RULE_SERVICE_ACCOUNTS, 0..=1),
        scope(RULE_NAMESPACES),
        scope(RULE_RESOURCES),
    )
        .prop_map(
            |(finalizers, users, groups, service_accounts, namespaces, resources)| ModelRule {
                finalizers,
                users,
                groups,
                service_accounts,
                namespaces,
                resources,
            },
        )
        // A rule that covers no one is refused by the policy parser.
        .prop_filter("a rule names a requester", |r| {
            !(r.users.is_empty() && r.groups.is_empty() && r.service_accounts.is_empty())
        })
}

fn policy() -> impl Strategy<Value = ModelPolicy> {
    (any::<bool>(), prop::bool::weighted(0.8), vec(rule(), 0..3)).prop_map(
        |(warn, builtin_controllers, rules)| ModelPolicy {
            warn,
            builtin_controllers,
            rules,
        },
    )
}

fn annotation() -> impl Strategy<Value = Option<(&'static str, &'static str)>> {
    proptest::option::weighted(
        0.6,
        (
            prop_oneof![9 => Just(OVERRIDE_KEY), 1 => Just("finalizer-guard.io/overide")],
            select(OVERRIDE_VALUES),
        ),
    )
}

fn request() -> impl Strategy<Value = Request> {
    (
        (
            prop_oneof![12 => Just("UPDATE"), 1 => Just("CREATE"), 1 => Just("DELETE")],
            any::<bool>(),
            any::<bool>(),
            proptest::option::weighted(0.95, select(USERNAMES)),
            subsequence(GROUPS, 0..=GROUPS.len()),
            proptest::option::of(select(NAMESPACES)),
            select(RESOURCES),
        ),
        (
            lists(),
            lists(),
            any::<[u8; 4]>(),
            annotation(),
            annotation(),
            proptest::bool::weighted(0.8),
        ),
    )
        .prop_map(
            |(
                (operation, v1beta1, dry_run, username, groups, namespace, resource),
                ((old, new), (old_spec, new_spec), empty_as, annotation, old_annotation, deleting),
            )| Request {
                operation,
                v1beta1,
                dry_run,
                username,
                groups,
                namespace,
                group: resource.0,
                resource: resource.1,
                subresource: resource.2,
                old,
                new,
                old_spec,
                new_spec,
                empty_as: empty_as.map(|b| b % 3),
                annotation,
                old_annotation,
                deleting,
            },
        )
}

// --- The wire -------------------------------------------------------------

const UID: &str = "0d5c1f6e-8a7b-4c3d-9e2f-1a2b3c4d5e6f";

impl ModelPolicy {
    /// The policy file (JSON is YAML).
    fn yaml(&self) -> String {
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|r| {
                let mut rule = json!({
                    "finalizers": r.finalizers,
                    "users": r.users,
                    "groups": r.groups,
                    "serviceAccounts": r.service_accounts,
                });
                if let Some(namespaces) = &r.namespaces {
                    rule["namespaces"] = json!(namespaces);
                }
                if let Some(resources) = &r.resources {
                    rule["resources"] = json!(resources);
                }
                rule
            })
            .collect();
        json!({
            "mode": if self.warn { "warn" } else { "enforce" },
            "builtinControllers": self.builtin_controllers,
            "rules": rules,
        })
        .to_string()
    }
}

impl Request {
    fn list(&self, which: usize, names: &[&str]) -> Option<Value> {
        match (names, self.empty_as[which]) {
            ([], 0) => None,
            ([], 1) => Some(Value::Null),
            _ => Some(json!(names)),
        }
    }

    fn object(
        &self,
        finalizers: (usize, &[&str]),
        spec: (usize, &[&str]),
        annotation: Option<(&str, &str)>,
    ) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!("obj-1"));
        if let Some(ns) = self.namespace.filter(|_| self.resource != "namespaces") {
            metadata.insert("namespace".into(), json!(ns));
        }
        metadata.insert("uid".into(), json!("6f1e2d3c-0000-4000-8000-000000000001"));
        if let Some(list) = self.list(finalizers.0, finalizers.1) {
            metadata.insert("finalizers".into(), list);
        }
        if let Some((key, value)) = annotation {
            metadata.insert("annotations".into(), json!({ key: value }));
        }
        if self.deleting {
            metadata.insert("deletionTimestamp".into(), json!("2026-11-21T07:00:00Z"));
        }
        let mut object = json!({"apiVersion": "v1", "kind": "Object", "metadata": metadata});
        if let Some(list) = self.list(spec.0, spec.1) {
            object["spec"] = json!({ "finalizers": list });
        }
        object
    }

    /// The AdmissionReview kube-apiserver would send.
    fn review(&self) -> Vec<u8> {
        let new = self.object((0, &self.new), (2, &self.new_spec), self.annotation);
        let old = self.object((1, &self.old), (3, &self.old_spec), self.old_annotation);
        let (object, old_object) = match self.operation {
            "CREATE" => (Some(new), None),
            "DELETE" => (None, Some(old)),
            _ => (Some(new), Some(old)),
        };
        let mut review = ReviewBuilder::pod_update("")
            .username(self.username)
            .groups(&self.groups)
            .uid(UID)
            .api_version(self.api_version())
            .operation(self.operation)
            .resource(self.group, "v1", self.resource, "Object")
            .name("obj-1")
            .namespace(self.namespace)
            .dry_run(self.dry_run)
            .object(object)
            .old_object(old_object);
        if !self.subresource.is_empty() {
            review = review.subresource(self.subresource);
        }
        review.to_vec()
    }

    fn api_version(&self) -> &'static str {
        if self.v1beta1 {
            "admission.k8s.io/v1beta1"
        } else {
            "admission.k8s.io/v1"
        }
    }
}

/// A comma-joined audit annotation, as a set of (finalizer, field).
fn joined(annotations: &Value, key: &str, field: &'static str) -> BTreeSet<(String, &'static str)> {
    annotations[key]
        .as_str()
        .map(|s| s.split(',').map(|f| (f.to_string(), field)).collect())
        .unwrap_or_default()
}

fn owned(set: &BTreeSet<(&'static str, &'static str)>) -> BTreeSet<(String, &'static str)> {
    set.iter()
        .map(|&(f, field)| (f.to_string(), field))
        .collect()
}

/// What the webhook answered, in the model's terms, checked against `want`.
fn check(r: &Request, got: &Reviewed, want: &Expected) -> Result<(), TestCaseError> {
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    let response = &body["response"];
    prop_assert_eq!(body["apiVersion"].as_str(), Some(r.api_version()));
    prop_assert_eq!(response["uid"].as_str(), Some(UID));
    prop_assert_eq!(response["allowed"].as_bool(), Some(want.allowed));
    prop_assert_eq!(got.allowed(), want.allowed);
    prop_assert_eq!(got.verdict().as_str(), want.decision);

    let annotations = &response["auditAnnotations"];
    let warnings = response["warnings"].as_array().map_or(0, Vec::len);
    if matches!(want.decision, "not-judged" | "nothing-removed") {
        // Allowed silently: no warning, nothing to audit.
        prop_assert!(annotations.is_null(), "{}", annotations);
        prop_assert_eq!(warnings, 0);
        prop_assert!(got.audit.is_none());
        return Ok(());
    }

    prop_assert_eq!(annotations["decision"].as_str(), Some(want.decision));
    let removed: BTreeSet<_> = joined(annotations, "removed-finalizers", METADATA)
        .into_iter()
        .chain(joined(annotations, "removed-spec-finalizers", SPEC))
        .collect();
    prop_assert_eq!(removed, owned(&want.removed));
    let unauthorized: BTreeSet<_> = joined(annotations, "unauthorized-finalizers", METADATA)
        .into_iter()
        .chain(joined(annotations, "unauthorized-spec-finalizers", SPEC))
        .collect();
    prop_assert_eq!(unauthorized, owned(&want.unauthorized));
    let audit = got.audit_record().unwrap();
    let recorded: Vec<_> = audit
        .removed_finalizers
        .iter()
        .map(|f| (f.finalizer.as_str(), f.field.path()))
        .collect();
    prop_assert_eq!(
        recorded.len(),
        want.removed.len(),
        "each removal once: {:?}",
        recorded
    );
    prop_assert_eq!(
        recorded.into_iter().collect::<BTreeSet<_>>(),
        want.removed.clone()
    );
    prop_assert_eq!(got.unauthorized(), want.unauthorized.len());
    prop_assert_eq!(audit.dry_run, r.dry_run);
    prop_assert_eq!(
        annotations["override-reason"].as_str(),
        want.override_reason
    );

    match want.decision {
        "override" | "would-deny" => prop_assert_eq!(warnings, 1),
        "denied" => {
            prop_assert_eq!(response["status"]["code"].as_u64(), Some(403));
            let message = response["status"]["message"].as_str().unwrap_or_default();
            // Names the removed finalizers, the object, the requester and how to override.
            for (f, _) in &want.unauthorized {
                prop_assert!(message.contains(&format!("{f:?}")), "{f}: {message}");
            }
            prop_assert!(message.contains("\"obj-1\""), "{}", message);
            let user = r.username.unwrap_or_default();
            prop_assert!(message.contains(&format!("{user:?}")), "{}", message);
            prop_assert!(message.contains(OVERRIDE_KEY), "{}", message);
            for reason in REASONS {
                prop_assert!(message.contains(reason), "{}", message);
            }
            // An override annotation that is present but not valid is quoted.
            if let Some((OVERRIDE_KEY, value)) = r.annotation {
                prop_assert!(message.contains(&format!("{value:?}")), "{}", message);
            }
        }
        _ => {}
    }
    Ok(())
}

proptest! {
    // Cheap enough for many cases; PROPTEST_CASES still overrides.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1024),
        ..ProptestConfig::default()
    })]

    #[test]
    fn decisions_agree_with_the_model(p in policy(), r in request()) {
        let policy = Policy::from_yaml(&p.yaml())
            .unwrap_or_else(|e| panic!("{e}: {}", p.yaml()));
        let now = "2026-11-21T08:00:00Z".parse().unwrap();
        let got = review_at(&policy, &r.review(), now).map_err(|e| {
            TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&r.review())))
        })?;
        check(&r, &got, &model(&p, &r))?;
    }
}

/// The alphabets stay short enough that no audit annotation value is cut.
#[test]
fn every_finalizer_joined_fits_an_audit_annotation() {
    assert!(FINALIZERS.join(",").chars().count() <= 256);
}

/// The strategies reach every decision, spec.finalizers and partly authorized removals.
#[test]
fn the_strategies_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;

    let mut runner = TestRunner::deterministic();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..1000 {
        let (p, r) = (policy(), request())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let want = model(&p, &r);
        *seen.entry(want.decision).or_default() += 1;
        if want.removed.iter().any(|&(_, field)| field == SPEC) {
            *seen.entry("spec.finalizers removed").or_default() += 1;
        }
        if !want.unauthorized.is_empty() && want.unauthorized.len() < want.removed.len() {
            *seen.entry("partly authorized").or_default() += 1;
        }
        if want.decision == "authorized"
            && want.removed.iter().any(|&(f, field)| {
                BUILTIN
                    .iter()
                    .any(|&(_, bf, bfield)| bf == f && bfield == field)
            })
        {
            *seen
                .entry("built-in finalizer removed, authorized")
                .or_default() += 1;
        }
    }
    eprintln!("{seen:#?}");
    for outcome in [
        "not-judged",
        "nothing-removed",
        "authorized",
        "override",
        "denied",
        "would-deny",
        "spec.finalizers removed",
        "partly authorized",
        "built-in finalizer removed, authorized",
    ] {
        assert!(
            seen.get(outcome).copied().unwrap_or(0) >= 20,
            "{outcome}: {seen:?}"
        );
    }
}
