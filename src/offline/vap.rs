//! `policy export --vap`: the policy as a ValidatingAdmissionPolicy and its
//! binding, so kube-apiserver itself decides what CEL can express of it,
//! with or without the webhook.
//!
//! Pure: a [`Policy`] in, YAML out. The decision is the one of
//! [`crate::policy::decide`], rule for rule: what a write removes
//! (`metadata.finalizers` on every UPDATE, a Namespace's `spec.finalizers`
//! through `namespaces/finalize`), the rules, the built-in controller table
//! and `builtinIdentities`, the override annotation and `requireDeletion`.
//! The built-in owners are computed by [`Policy::builtin_owner`] itself, so
//! the table in the YAML is the webhook's.
//!
//! What CEL cannot do is said in the YAML's comments ([`NOT_EXPRESSED`]),
//! and a policy that a ValidatingAdmissionPolicy cannot decide faithfully is
//! refused ([`ExportError`]) rather than exported weaker.
//!
//! `override.finalizers` is decided here as the webhook decides it (the
//! reasons that release each finalizer, `never`). The two-person override
//! is not: an approval proves something only by the webhook's seal and
//! clock, which CEL has neither of. So under `override.approval` the
//! policy takes no override at all (every finalizer needs an approval
//! there): it never allows a removal the webhook denies, and it denies the
//! approved overrides the webhook allows. The rest (rules, built-in
//! controllers, the finalizer lists) is decided as the webhook decides it.
//!
//! Every string from the policy reaches CEL through [`lit`] (a CEL string
//! literal of printable ASCII, everything else escaped) and the YAML through
//! serde_yaml_ng, so no name can end an expression or a YAML scalar early.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::admissionregistration::v1::{
    AuditAnnotation, MatchCondition, MatchResources, NamedRuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::policy::FinalizerField;
use crate::policy::builtin::{self, BUILTIN_CONTROLLERS};
use crate::policy::config::{FinalizerPattern, Mode, Policy, Rule};
use crate::policy::servable;

/// The name of the ValidatingAdmissionPolicy and of its binding. The audit
/// annotations it writes are prefixed with it (`finalizer-guard/decision`),
/// apart from the webhook's (`finalizers.finalizer-guard.io/decision`), so
/// both can run at once.
pub const NAME: &str = "finalizer-guard";

/// cel-go's parser refuses an expression longer than this many code points
/// (`parser.ExpressionSizeCodePointLimit`'s default, which kube-apiserver
/// keeps): the policy is refused at create time.
pub const MAX_EXPRESSION_CODE_POINTS: usize = 100_000;

/// The longest finalizer list (`metadata.finalizers`, a Namespace's
/// `spec.finalizers`), before or after a write, that the policy judges; a
/// write that changes a longer one is refused. Finding the removed names
/// compares every old name with every new one: kube-apiserver's CEL cost
/// accounting charges a list membership test as one unit, whatever the
/// list's length, so its per-expression limit never stops that. Measured on
/// kube-apiserver 1.34 (README, "Three ways to run the guard"): 8000
/// finalizers took about 28 s of one core, 2000 about 1.5 s. The bound also
/// keeps [`estimated_cost`] within kube-apiserver's limit for policies of
/// hundreds of rules.
pub const MAX_FINALIZERS: usize = 128;

/// kube-apiserver's CEL cost limit for one evaluation of one expression
/// (`PerCallLimit`): over it, the evaluation fails and the write is
/// refused (failurePolicy Fail).
pub const PER_CALL_COST_LIMIT: u64 = 1_000_000;

/// What kube-apiserver charges, at most, for testing one removed finalizer
/// against one rule, and for each of the rule's prefixes on top
/// (`startsWith` costs a tenth of the finalizer's length, at most 317
/// characters), as measured on kube-apiserver 1.34 with the loop's own
/// charges: 512 removed finalizers against 150 rules stayed within the
/// limit, against 200 did not (about 10 to 13 a pair); with two prefixes a
/// rule, 50 rules did, 100 did not.
const COST_PER_RULE: u64 = 14;
const COST_PER_PREFIX: u64 = 36;

/// Every character an override's value may hold: letters, marks, numbers,
/// punctuation, symbols and spaces. Its complement is what
/// `overrides::parse` refuses as a control or format character: controls
/// (Cc), format (Cf), private use (Co), surrogates (Cs), the line and
/// paragraph separators (Zl, Zp), and unassigned code points (Cn, here:
/// what belongs to no category in the API server's Unicode tables).
pub const ALLOWED_CHARACTERS: &str = r"^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]*$";

/// A visible character, somewhere in DETAIL: a letter, number, punctuation
/// or symbol, but not those drawn as blank space (the Hangul fillers
/// U+115F, U+1160, U+3164, U+FFA0 and the blank Braille pattern U+2800),
/// as in `overrides::is_visible`. RE2 has no class subtraction, so each
/// category minus its blanks is a negated class of its complement.
pub const VISIBLE_CHARACTER: &str =
    r"[\p{N}\p{P}]|[^\P{L}\x{115F}\x{1160}\x{3164}\x{FFA0}]|[^\P{S}\x{2800}]";

/// What the webhook does that no ValidatingAdmissionPolicy can, in the
/// export's comments.
pub const NOT_EXPRESSED: &[&str] = &[
    "the two-person override (override.approval): an approval proves something only by the webhook's seal and clock; under it this policy takes no override at all, so while it is bound an approved override is denied here too (release by a rule or built-in controller, or take the binding out for the time it takes: kube-apiserver's audit log records that)",
    "writes of the approval annotations (approved-by, override-expires, approval-seal): judged by the webhook alone; this policy honours no approval",
    "Events on the object (FinalizerRemovalDenied, FinalizerOverride), the JSON audit record on stdout, metrics and recordings",
    "the leak ledger (the `protected` audit annotation: what an overridden finalizer protected)",
    "a warning to the client for an override used in enforce mode (the `override-reason` and `override-detail` audit annotations still record it)",
    "`authorized-by` names every rule that covers a removed finalizer, where the webhook names the first",
    "`removed-finalizers` lists a finalizer the old list repeats as often as it repeats it; the webhook lists it once",
    "the denial's wording: the same facts, and the override annotation's value is not quoted back",
    "a change of a finalizer list longer than 128 names (before or after the write): refused here, whoever asks; judged by the webhook",
    "Unicode: the API server's tables (Go's) decide what a control, format or visible character is; a character newer than them is refused in an override, which the webhook may accept",
];

/// Why a policy is not exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the policy blocks Kubernetes' own controllers in enforce mode ({0}), which serve refuses too"
    )]
    BlocksBuiltinControllers(String),
    #[error(
        "{what} would be {size} characters of CEL, more than the {limit} kube-apiserver accepts in one expression: use prefixes (example.com/*) for long lists of names, or fewer rules"
    )]
    TooLarge {
        what: String,
        size: usize,
        limit: usize,
    },
    #[error(
        "rules: {rules} rules can cover one requester (those naming groups, and the most that name one user), with {prefixes} prefixes among them: \
         judging {max} removed finalizers against them would cost kube-apiserver about {cost}, over its limit of {limit} for one expression, \
         and such a write would be refused. Name fewer groups in more rules, merge rules, or use fewer prefixes"
    )]
    TooCostly {
        rules: usize,
        prefixes: usize,
        max: usize,
        cost: u64,
        limit: u64,
    },
}

/// The two objects `kubectl apply` takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub policy: ValidatingAdmissionPolicy,
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// The policy as a ValidatingAdmissionPolicy and its binding, as YAML with
/// comments: what is decided, and what is not.
pub fn export_yaml(policy: &Policy) -> Result<String, ExportError> {
    let export = export(policy)?;
    Ok(render(policy, &export))
}

/// The policy as a ValidatingAdmissionPolicy and its binding.
pub fn export(policy: &Policy) -> Result<Export, ExportError> {
    if let Err(blocked) = servable::servable(policy) {
        let names: Vec<String> = blocked.iter().map(ToString::to_string).collect();
        return Err(ExportError::BlocksBuiltinControllers(names.join("; ")));
    }
    let variables = variables(policy);
    for v in &variables {
        let size = v.expression.chars().count();
        if size > MAX_EXPRESSION_CODE_POINTS {
            return Err(ExportError::TooLarge {
                what: format!("variable {}", v.name),
                size,
                limit: MAX_EXPRESSION_CODE_POINTS,
            });
        }
    }
    let cost = estimated_cost(policy);
    if cost.cost > PER_CALL_COST_LIMIT {
        return Err(ExportError::TooCostly {
            rules: cost.rules,
            prefixes: cost.prefixes,
            max: MAX_FINALIZERS,
            cost: cost.cost,
            limit: PER_CALL_COST_LIMIT,
        });
    }
    let spec = ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            match_policy: Some("Equivalent".into()),
            namespace_selector: Some(LabelSelector::default()),
            object_selector: Some(LabelSelector::default()),
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec!["*".into()]),
                api_versions: Some(vec!["*".into()]),
                operations: Some(vec!["UPDATE".into()]),
                resources: Some(vec!["*/*".into()]),
                scope: Some("*".into()),
                resource_names: None,
            }]),
            exclude_resource_rules: None,
        }),
        match_conditions: Some(vec![MatchCondition {
            name: "changes-finalizers".into(),
            expression: CHANGES_FINALIZERS.into(),
        }]),
        variables: Some(variables),
        validations: Some(vec![Validation {
            expression: format!("variables.decision != {}", lit(denied_word(policy.mode))),
            message: Some(format!(
                "finalizer-guard denied removing finalizers that the requester is not authorized to remove by any rule or built-in controller.{}",
                how_to_override(policy)
            )),
            message_expression: Some(message_expression(policy)),
            reason: Some("Forbidden".into()),
        }]),
        audit_annotations: Some(audit_annotations(policy)),
        param_kind: None,
    };
    let metadata = ObjectMeta {
        name: Some(NAME.into()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_string(),
            "finalizer-guard".to_string(),
        )])),
        ..ObjectMeta::default()
    };
    let actions = match policy.mode {
        Mode::Enforce => ["Deny", "Audit"],
        Mode::Warn => ["Warn", "Audit"],
    };
    Ok(Export {
        policy: ValidatingAdmissionPolicy {
            metadata: metadata.clone(),
            spec: Some(spec),
            status: None,
        },
        binding: ValidatingAdmissionPolicyBinding {
            metadata,
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: NAME.into(),
                validation_actions: actions.iter().map(|a| a.to_string()).collect(),
                match_resources: None,
                param_ref: None,
            },
        },
    })
}

/// Why a file is not the export of a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the policy is not exported: {0}")]
    Export(#[from] ExportError),
    #[error("not YAML: {0}")]
    Yaml(String),
    #[error(
        "it holds {found} objects where the export has 2 (the ValidatingAdmissionPolicy and its binding)"
    )]
    Count { found: usize },
    #[error("the {object} differs from the export of this policy at {at}")]
    Differs { object: String, at: String },
}

/// Whether `yaml` is `policy export --vap` of `policy`: the same objects,
/// field for field (comments and formatting aside). A policy changed but not
/// exported again leaves kube-apiserver deciding the old one; this is how
/// the chart's policy check (and a CI job over an overlay) catches that.
pub fn verify(policy: &Policy, yaml: &str) -> Result<(), VerifyError> {
    use serde::Deserialize;
    let export = export(policy)?;
    let want = [
        ("ValidatingAdmissionPolicy", to_json(&export.policy)),
        ("ValidatingAdmissionPolicyBinding", to_json(&export.binding)),
    ];
    let mut found = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document)
            .map_err(|e| VerifyError::Yaml(e.to_string()))?;
        if !value.is_null() {
            found.push(value);
        }
    }
    if found.len() != want.len() {
        return Err(VerifyError::Count { found: found.len() });
    }
    for ((kind, want), found) in want.iter().zip(&found) {
        if let Some(at) = first_difference(want, found, "") {
            return Err(VerifyError::Differs {
                object: format!("{kind} {NAME}"),
                at: if at.is_empty() { "the top".into() } else { at },
            });
        }
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(object: &T) -> serde_json::Value {
    serde_json::to_value(object).expect("Kubernetes objects serialize")
}

/// The path of the first field where `a` and `b` differ (`spec.variables[3].expression`).
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => first_difference(x, y, &path),
                    _ => Some(path),
                }
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{at}[{i}]"))),
        _ => (a != b).then(|| at.to_string()),
    }
}

/// The worst case of the most expensive expression: every removed
/// finalizer tested against every rule that can cover one requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// The rules that can cover one requester: every rule that names a
    /// group (a requester may be in all of them), and the most rules that
    /// name one username.
    pub rules: usize,
    /// The prefixes of those rules.
    pub prefixes: usize,
    /// What kube-apiserver would charge, at most.
    pub cost: u64,
}

/// What kube-apiserver would charge, at most, for the most expensive
/// expression: `authorized-by`, which tests each removed finalizer of both
/// lists, up to [`MAX_FINALIZERS`] each, against each rule covering the
/// requester (`unauthorizedFinalizers` tests one list).
pub fn estimated_cost(policy: &Policy) -> Cost {
    let mut worst: Vec<&Rule> = policy
        .rules
        .iter()
        .filter(|r| !r.groups.is_empty())
        .collect();
    let mut by_user: BTreeMap<&str, Vec<&Rule>> = BTreeMap::new();
    for rule in policy.rules.iter().filter(|r| r.groups.is_empty()) {
        let mut users: Vec<&str> = rule
            .users
            .iter()
            .chain(&rule.service_accounts)
            .map(String::as_str)
            .collect();
        users.sort_unstable();
        users.dedup();
        for user in users {
            by_user.entry(user).or_default().push(rule);
        }
    }
    if let Some(most) = by_user.into_values().max_by_key(Vec::len) {
        worst.extend(most);
    }
    let prefixes = worst
        .iter()
        .flat_map(|r| &r.finalizers)
        .filter(|p| matches!(p, FinalizerPattern::Prefix(_)))
        .count();
    let per_finalizer = COST_PER_RULE * worst.len() as u64 + COST_PER_PREFIX * prefixes as u64;
    Cost {
        rules: worst.len(),
        prefixes,
        cost: 2 * MAX_FINALIZERS as u64 * per_finalizer,
    }
}

/// A change of `metadata.finalizers`, or of a Namespace's `spec.finalizers`
/// through `namespaces/finalize`: the only writes the validations are
/// evaluated for. Cheaper than the webhook's condition (a list comparison,
/// not a set difference): the difference is computed once, in the
/// variables, and everyday writes never get that far.
const CHANGES_FINALIZERS: &str = "\
(has(oldObject.metadata) && has(oldObject.metadata.finalizers) &&
  oldObject.metadata.finalizers != null && size(oldObject.metadata.finalizers) > 0 &&
  !(has(object.metadata) && has(object.metadata.finalizers) &&
    object.metadata.finalizers == oldObject.metadata.finalizers))
||
(request.resource.group == '' && request.resource.resource == 'namespaces' &&
  request.subResource == 'finalize' &&
  has(oldObject.spec) && has(oldObject.spec.finalizers) &&
  oldObject.spec.finalizers != null && size(oldObject.spec.finalizers) > 0 &&
  !(has(object.spec) && has(object.spec.finalizers) &&
    object.spec.finalizers == oldObject.spec.finalizers))";

/// `variables.decision` for a removal nothing allows: the webhook's verdict.
fn denied_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "denied",
        Mode::Warn => "would-deny",
    }
}

fn var(name: &str, expression: impl Into<String>) -> Variable {
    Variable {
        name: name.into(),
        expression: expression.into(),
    }
}

/// The decision, step by step (README, "How a review is decided"): each
/// step's variables may read those of the steps before it.
fn variables(policy: &Policy) -> Vec<Variable> {
    let mut all = removed_variables();
    all.extend(builtin_variables(policy));
    all.extend(rule_variables(policy));
    all.extend(override_variables(policy));
    all.push(decision_variable(policy.mode));
    all
}

/// Step 2, which finalizers the write removes, from `metadata.finalizers` and,
/// through `namespaces/finalize`, a Namespace's `spec.finalizers`.
fn removed_variables() -> Vec<Variable> {
    vec![
        var(
            "oldFinalizers",
            "// 2. Removed: names in oldObject's list absent from object's; absent, null and [] are all empty.\n\
             has(oldObject.metadata) && has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers != null ?\n  \
             oldObject.metadata.finalizers : []",
        ),
        var(
            "newFinalizers",
            "has(object.metadata) && has(object.metadata.finalizers) && object.metadata.finalizers != null ?\n  \
             object.metadata.finalizers : []",
        ),
        var(
            "namespaceFinalize",
            "// A Namespace's spec.finalizers, written through namespaces/finalize, is guarded the same way.\n\
             request.resource.group == '' && request.resource.resource == 'namespaces' && request.subResource == 'finalize'",
        ),
        var(
            "oldSpecFinalizers",
            "variables.namespaceFinalize && has(oldObject.spec) && has(oldObject.spec.finalizers) &&\n  \
             oldObject.spec.finalizers != null ? oldObject.spec.finalizers : []",
        ),
        var(
            "newSpecFinalizers",
            "variables.namespaceFinalize && has(object.spec) && has(object.spec.finalizers) &&\n  \
             object.spec.finalizers != null ? object.spec.finalizers : []",
        ),
        var(
            "tooManyFinalizers",
            format!(
                "// Longer lists are refused, not judged: comparing two lists costs kube-apiserver\n\
                 // time that grows with the product of their lengths, and its CEL cost limit does not stop it.\n\
                 size(variables.oldFinalizers) > {max} || size(variables.newFinalizers) > {max} ||\n  \
                 size(variables.oldSpecFinalizers) > {max} || size(variables.newSpecFinalizers) > {max}",
                max = MAX_FINALIZERS
            ),
        ),
        var(
            "removedFinalizers",
            "variables.tooManyFinalizers ? [] :\n  \
             variables.oldFinalizers.filter(f, !(f in variables.newFinalizers))",
        ),
        var(
            "removedSpecFinalizers",
            "variables.tooManyFinalizers ? [] :\n  \
             variables.oldSpecFinalizers.filter(f, !(f in variables.newSpecFinalizers))",
        ),
    ]
}

/// Step 4, Kubernetes' own controllers: the finalizers the requester may remove
/// as one of them.
fn builtin_variables(policy: &Policy) -> Vec<Variable> {
    let (builtin_metadata, builtin_spec) = builtin_tables(policy);
    vec![
        var(
            "builtinTable",
            format!(
                "// 4. Kubernetes' own controllers, by exact username (builtinControllers{}):\n\
                 // the metadata.finalizers each may remove, and which controller it is then.\n{}",
                if policy.builtin_identities.is_empty() {
                    ""
                } else {
                    " and builtinIdentities"
                },
                table_literal(&builtin_metadata)
            ),
        ),
        var(
            "builtinSpecTable",
            format!(
                "// The same for a Namespace's spec.finalizers.\n{}",
                table_literal(&builtin_spec)
            ),
        ),
        var(
            "builtinFinalizers",
            "request.userInfo.username in variables.builtinTable ?\n  \
             variables.builtinTable[request.userInfo.username] : {}",
        ),
        var(
            "builtinSpecFinalizers",
            "request.userInfo.username in variables.builtinSpecTable ?\n  \
             variables.builtinSpecTable[request.userInfo.username] : {}",
        ),
    ]
}

/// Step 4, the rules covering the requester, the object's namespace and its
/// resource, and the removed finalizers that neither they nor the built-in
/// table authorize.
fn rule_variables(policy: &Policy) -> Vec<Variable> {
    vec![
        var(
            "resource",
            "// RESOURCE or RESOURCE.GROUP, as rules name resources.\n\
             request.resource.group == '' ? request.resource.resource :\n  \
             request.resource.resource + '.' + request.resource.group",
        ),
        var(
            "objectNamespace",
            "// '' for a cluster-scoped object; a Namespace is cluster-scoped, whatever request.namespace says.\n\
             variables.resource == 'namespaces' ? '' : request.namespace",
        ),
        var("rules", rules_literal(&policy.rules)),
        var(
            "policyGroups",
            format!(
                "// Every group a rule names, for one lookup per group of the requester.\n{}",
                set_literal(
                    policy
                        .rules
                        .iter()
                        .flat_map(|r| r.groups.iter().map(String::as_str))
                )
            ),
        ),
        var(
            "requesterGroups",
            "// kube-apiserver leaves out an empty groups list.\n\
             has(request.userInfo.groups) ?\n  \
             request.userInfo.groups.filter(g, g in variables.policyGroups) : []",
        ),
        var(
            "requesterRules",
            "// The rules covering this requester, namespace and resource.\n\
             variables.rules.filter(r,\n  \
             ((has(r.users) && request.userInfo.username in r.users) ||\n    \
             (has(r.groups) && r.groups.exists(g, g in variables.requesterGroups))) &&\n  \
             (!has(r.namespaces) || variables.objectNamespace in r.namespaces) &&\n  \
             (!has(r.resources) || variables.resource in r.resources))",
        ),
        var(
            "unauthorizedFinalizers",
            "variables.removedFinalizers.filter(f, !(f in variables.builtinFinalizers ||\n  \
             variables.requesterRules.exists(r, (has(r.finalizers) && f in r.finalizers) ||\n    \
             (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p))))))",
        ),
        var(
            "unauthorizedSpecFinalizers",
            "variables.removedSpecFinalizers.filter(f, !(f in variables.builtinSpecFinalizers ||\n  \
             variables.requesterRules.exists(r, (has(r.finalizers) && f in r.finalizers) ||\n    \
             (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p))))))",
        ),
    ]
}

/// Step 5, the override annotation, and why it does not apply ('' when it does).
fn override_variables(policy: &Policy) -> Vec<Variable> {
    let settings = &policy.override_settings;
    let deletion = if settings.require_deletion {
        "\n// override.requireDeletion: an override releases only an object being deleted.\n\
         !(has(oldObject.metadata) && has(oldObject.metadata.deletionTimestamp) &&\n  \
         oldObject.metadata.deletionTimestamp != null) ?\n  \
         'the object is not being deleted: an override only releases an object stuck in Terminating (delete it first)' :"
    } else {
        ""
    };
    // override.finalizers: checked after the value, before requireDeletion, as the webhook does.
    let refused = if settings.finalizers.is_empty() {
        ""
    } else {
        "\nsize(variables.refusedFinalizers) > 0 ?\n  \
         variables.refusedFinalizers.map(f, strings.quote(f) +\n    \
         variables.overrideEntries.filter(e, (has(e.finalizers) && f in e.finalizers) ||\n      \
         (has(e.prefixes) && e.prefixes.exists(p, f.startsWith(p)))).map(e, string(e.refusal)).join('')).join('; ') :"
    };
    let mut all = vec![
        var(
            "overrideValue",
            format!(
                "// 5. The override annotation on the object as it will be stored.\n\
                 has(object.metadata) && has(object.metadata.annotations) && object.metadata.annotations != null &&\n  \
                 {key} in object.metadata.annotations ? object.metadata.annotations[{key}] : null",
                key = lit(&settings.annotation)
            ),
        ),
        var(
            "overrideReason",
            "// REASON: DETAIL, split at the first ':' and trimmed.\n\
             variables.overrideValue != null && variables.overrideValue.indexOf(':') >= 0 ?\n  \
             variables.overrideValue.substring(0, variables.overrideValue.indexOf(':')).trim() : ''",
        ),
        var(
            "overrideDetail",
            "variables.overrideValue != null && variables.overrideValue.indexOf(':') >= 0 ?\n  \
             variables.overrideValue.substring(variables.overrideValue.indexOf(':') + 1).trim() : ''",
        ),
    ];
    if !settings.finalizers.is_empty() {
        all.push(var("overrideEntries", entries_literal(policy)));
        all.push(var(
            "refusedFinalizers",
            "// The removed finalizers nothing authorizes whose entry the override's reason does not release.\n\
             (variables.unauthorizedFinalizers + variables.unauthorizedSpecFinalizers).filter(f,\n  \
             variables.overrideEntries.exists(e, ((has(e.finalizers) && f in e.finalizers) ||\n    \
             (has(e.prefixes) && e.prefixes.exists(p, f.startsWith(p)))) &&\n    \
             !(variables.overrideReason in e.reasons)))",
        ));
    }
    let problem = if settings.approval.is_some() {
        // The two-person override: no approval can be verified here, so no
        // override is taken. Never an allow the webhook would deny.
        format!(
            "// Why the override does not apply: under override.approval every override needs an approval,\n\
             // which only the webhook can verify (its seal and clock); this policy takes none.\n\
             variables.overrideValue == null ? 'absent' :\n  \
             {}",
            lit(APPROVAL_NOT_HERE)
        )
    } else {
        format!(
            "// Why the override does not apply, or '' when it does (the webhook's checks, in its order).\n\
             variables.overrideValue == null ? 'absent' :\n\
             !variables.overrideValue.matches({allowed}) ?\n  \
             'it holds a control or format character: write \"REASON: DETAIL\" as plain text on one line' :\n\
             variables.overrideReason == '' ? 'it must read \"REASON: DETAIL\"' :\n\
             !(variables.overrideReason in {reasons}) ?\n  \
             'reason ' + strings.quote(variables.overrideReason) + ' is not an approved reason' :\n\
             !variables.overrideDetail.matches({visible}) ?\n  \
             'DETAIL is empty or has no visible character: say what happened, e.g. an incident id and the node' :\
             {refused}{deletion}\n\
             ''",
            allowed = lit(ALLOWED_CHARACTERS),
            reasons = list_literal(settings.reasons.iter().map(String::as_str)),
            visible = lit(VISIBLE_CHARACTER),
        )
    };
    all.push(var("overrideProblem", problem));
    all
}

/// Why no override is taken under `override.approval`.
const APPROVAL_NOT_HERE: &str = "an override needs the two-person approval (override.approval), which only the webhook verifies: this ValidatingAdmissionPolicy takes none";

/// `override.finalizers` as data: per entry, its exact names and prefixes,
/// the reasons that release them (none for `never`), and the refusal's words.
fn entries_literal(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    let mut s = String::from(
        "// override.finalizers, one entry a line: the finalizers (exact names and prefixes) and the\n\
         // reasons that release them (none: no override does, only its rule or controller).\n[",
    );
    for (i, entry) in settings.finalizers.iter().enumerate() {
        s.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for pattern in &entry.finalizers {
            match pattern {
                FinalizerPattern::Exact(n) => exact.push(n.as_str()),
                FinalizerPattern::Prefix(n) => prefixes.push(n.as_str()),
            }
        }
        let accepts = match entry {
            e if e.never => Vec::new(),
            e => e
                .reasons
                .as_deref()
                .unwrap_or(&settings.reasons)
                .iter()
                .map(String::as_str)
                .collect(),
        };
        let refusal = if accepts.is_empty() {
            format!(
                ": no override releases it, only its rule or controller ({})",
                entry.label
            )
        } else {
            format!(" accepts only {} ({})", accepts.join(", "), entry.label)
        };
        let _ = write!(
            s,
            "'reasons': dyn({}), 'refusal': dyn({})",
            list_literal(accepts),
            lit(&refusal)
        );
        if !exact.is_empty() {
            let _ = write!(s, ", 'finalizers': dyn({})", list_literal(exact));
        }
        if !prefixes.is_empty() {
            let _ = write!(s, ", 'prefixes': dyn({})", list_literal(prefixes));
        }
        s.push('}');
    }
    s.push_str("\n]");
    s
}

/// Steps 3 to 6: '' when nothing is removed, else the webhook's verdict.
fn decision_variable(mode: Mode) -> Variable {
    let denied = denied_word(mode);
    var(
        "decision",
        format!(
            "// 3., 4., 5. and 6.: '' when nothing is removed.\n\
             variables.tooManyFinalizers ? {denied} :\n\
             size(variables.removedFinalizers) + size(variables.removedSpecFinalizers) == 0 ? '' :\n\
             size(variables.unauthorizedFinalizers) + size(variables.unauthorizedSpecFinalizers) == 0 ? 'authorized' :\n\
             variables.overrideProblem == '' ? 'override' : {denied}",
            denied = lit(denied)
        ),
    )
}

/// The denial, naming what the webhook's names: the finalizers, the
/// object, the requester, and how to override.
fn message_expression(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    format!(
        "variables.tooManyFinalizers ?\n  \
         'finalizer-guard refused changing the finalizers of ' + variables.resource + ' ' + strings.quote(request.name) +\n  \
         (variables.objectNamespace == '' ? '' : ' in namespace ' + strings.quote(variables.objectNamespace)) +\n  \
         {too_many} :\n\
         'finalizer-guard denied removing ' +\n\
         (size(variables.unauthorizedFinalizers) == 0 ? '' :\n  \
         (size(variables.unauthorizedFinalizers) == 1 ? 'finalizer ' : 'finalizers ') +\n  \
         variables.unauthorizedFinalizers.map(f, strings.quote(f)).join(', ')) +\n\
         (size(variables.unauthorizedFinalizers) > 0 && size(variables.unauthorizedSpecFinalizers) > 0 ? ' and ' : '') +\n\
         (size(variables.unauthorizedSpecFinalizers) == 0 ? '' :\n  \
         'spec.finalizers ' + variables.unauthorizedSpecFinalizers.map(f, strings.quote(f)).join(', ')) +\n\
         ' from ' + variables.resource + ' ' + strings.quote(request.name) +\n\
         (variables.objectNamespace == '' ? '' : ' in namespace ' + strings.quote(variables.objectNamespace)) +\n\
         ': requester ' +\n\
         (request.userInfo.username.matches({allowed}) ? strings.quote(request.userInfo.username) :\n  \
         'whose name holds control or format characters') +\n\
         ' is not authorized to remove ' +\n\
         (size(variables.unauthorizedFinalizers) + size(variables.unauthorizedSpecFinalizers) == 1 ? 'it' : 'them') +\n\
         ' by any rule or built-in controller.' +\n\
         (variables.overrideProblem == 'absent' ? '' :\n  \
         ' The override annotation ' + {key} + ' is not valid: ' + variables.overrideProblem + '.') +\n\
         {how}",
        allowed = lit(ALLOWED_CHARACTERS),
        key = lit(&settings.annotation),
        too_many = lit(&format!(
            ": it holds more than {MAX_FINALIZERS} finalizers, more than this ValidatingAdmissionPolicy judges; \
             to change them, take its binding {NAME} out for the time it takes (kube-apiserver's audit log records that)"
        )),
        how = lit(&how_to_override(policy)),
    )
}

/// The end of a denial: how to override, as far as this policy takes one.
fn how_to_override(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    if settings.approval.is_some() {
        return format!(
            " An override needs the two-person approval, which only the webhook verifies: this ValidatingAdmissionPolicy takes none \
             (an approver annotates the object with {} and {}; see the webhook's denial).",
            settings.annotation,
            crate::policy::approval::APPROVED_BY
        );
    }
    format!(
        " To override in an emergency, annotate the object with {}: \"REASON: DETAIL\", REASON one of: {}{}.",
        settings.annotation,
        settings.reasons.join(", "),
        if settings.finalizers.is_empty() {
            ""
        } else {
            " (override.finalizers narrows them for some finalizers)"
        }
    )
}

/// The webhook's audit annotations, as far as CEL computes them.
fn audit_annotations(policy: &Policy) -> Vec<AuditAnnotation> {
    let denied = denied_word(policy.mode);
    let controllers = list_literal(BUILTIN_CONTROLLERS.iter().map(|c| c.name));
    let annotation = |key: &str, value: String| AuditAnnotation {
        key: key.into(),
        value_expression: value,
    };
    let covers = "(has(r.finalizers) && f in r.finalizers) ||\n    (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p)))";
    vec![
        annotation("decision", "variables.decision".into()),
        annotation(
            "too-many-finalizers",
            format!("variables.tooManyFinalizers ? \"more than {MAX_FINALIZERS}\" : \"\""),
        ),
        annotation(
            "removed-finalizers",
            "variables.removedFinalizers.join(',')".into(),
        ),
        annotation(
            "removed-spec-finalizers",
            "variables.removedSpecFinalizers.join(',')".into(),
        ),
        annotation(
            "unauthorized-finalizers",
            "variables.unauthorizedFinalizers.join(',')".into(),
        ),
        annotation(
            "unauthorized-spec-finalizers",
            "variables.unauthorizedSpecFinalizers.join(',')".into(),
        ),
        annotation(
            "authorized-by",
            format!(
                "({controllers}.filter(c,\n  \
                 variables.removedFinalizers.exists(f, f in variables.builtinFinalizers && variables.builtinFinalizers[f] == c) ||\n  \
                 variables.removedSpecFinalizers.exists(f, f in variables.builtinSpecFinalizers && variables.builtinSpecFinalizers[f] == c)\n\
                 ).map(c, 'built-in controller ' + c) +\n\
                 variables.requesterRules.filter(r,\n  \
                 variables.removedFinalizers.exists(f, !(f in variables.builtinFinalizers) && ({covers})) ||\n  \
                 variables.removedSpecFinalizers.exists(f, !(f in variables.builtinSpecFinalizers) && ({covers}))\n\
                 ).map(r, 'rule ' + r.name)).join(', ')"
            ),
        ),
        annotation(
            "override-reason",
            "variables.decision == \"override\" ? variables.overrideReason : \"\"".into(),
        ),
        annotation(
            "override-detail",
            "variables.decision == \"override\" ? variables.overrideDetail : \"\"".into(),
        ),
        annotation(
            "override-problem",
            format!(
                "variables.decision == {} && variables.overrideProblem != \"absent\" ? variables.overrideProblem : \"\"",
                dq(denied)
            ),
        ),
        annotation(
            "mode",
            format!(
                "variables.decision == {} ? {} : \"\"",
                dq(denied),
                dq(policy.mode.as_str())
            ),
        ),
    ]
}

/// For each username the table and `builtinIdentities` know, the finalizers
/// it may remove as a built-in controller, and that controller's name:
/// what [`Policy::builtin_owner`] answers, asked for every pair.
type Table = BTreeMap<String, BTreeMap<&'static str, &'static str>>;

fn builtin_tables(policy: &Policy) -> (Table, Table) {
    let (mut metadata, mut spec) = (Table::new(), Table::new());
    if !policy.builtin_controllers {
        return (metadata, spec);
    }
    let mut usernames: Vec<&str> = builtin::all_usernames();
    for identity in &policy.builtin_identities {
        for user in &identity.users {
            if !usernames.contains(&user.as_str()) {
                usernames.push(user);
            }
        }
    }
    for username in usernames {
        for controller in BUILTIN_CONTROLLERS {
            for finalizer in controller.finalizers {
                if let Some(owner) = policy.builtin_owner(username, finalizer, controller.field) {
                    let table = match controller.field {
                        FinalizerField::Metadata => &mut metadata,
                        FinalizerField::Spec => &mut spec,
                    };
                    table
                        .entry(username.to_string())
                        .or_default()
                        .insert(finalizer, owner.name);
                }
            }
        }
    }
    (metadata, spec)
}

fn table_literal(table: &Table) -> String {
    if table.is_empty() {
        return "{}".into();
    }
    let mut s = String::from("{");
    for (i, (user, finalizers)) in table.iter().enumerate() {
        s.push_str(if i == 0 { "\n  " } else { ",\n  " });
        let _ = write!(s, "{}: {{", lit(user));
        for (j, (finalizer, controller)) in finalizers.iter().enumerate() {
            if j > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}: {}", lit(finalizer), lit(controller));
        }
        s.push('}');
    }
    s.push_str("\n}");
    s
}

/// The rules as data: a list of maps, one per rule, in the policy's order.
/// `dyn()` keeps the map's values of one type, as kube-apiserver's
/// homogeneous-literal check wants. `namespaces` and `resources` are there
/// only when the rule is scoped.
fn rules_literal(rules: &[Rule]) -> String {
    let mut s = String::from(
        "// 4. The rules, one a line: users (service accounts as their usernames), groups, exact\n\
         // finalizer names and prefixes (patterns ending in *), and the namespaces and resources\n\
         // a rule is scoped to. A field is left out when empty.\n[",
    );
    for (i, rule) in rules.iter().enumerate() {
        s.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
        let _ = write!(s, "'name': dyn({})", lit(&rule.label));
        let mut field = |key: &str, names: Vec<&str>| {
            if !names.is_empty() {
                let _ = write!(s, ", '{key}': dyn({})", list_literal(names));
            }
        };
        let users: Vec<&str> = rule
            .users
            .iter()
            .chain(&rule.service_accounts)
            .map(String::as_str)
            .collect();
        field("users", users);
        field("groups", rule.groups.iter().map(String::as_str).collect());
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for pattern in &rule.finalizers {
            match pattern {
                FinalizerPattern::Exact(n) => exact.push(n.as_str()),
                FinalizerPattern::Prefix(n) => prefixes.push(n.as_str()),
            }
        }
        field("finalizers", exact);
        field("prefixes", prefixes);
        // Scoped to nothing is not the same as not scoped: an empty list stays.
        if let Some(namespaces) = &rule.namespaces {
            let _ = write!(
                s,
                ", 'namespaces': dyn({})",
                list_literal(namespaces.iter().map(String::as_str))
            );
        }
        if let Some(resources) = &rule.resources {
            let names: Vec<String> = resources.iter().map(ToString::to_string).collect();
            let _ = write!(
                s,
                ", 'resources': dyn({})",
                list_literal(names.iter().map(String::as_str))
            );
        }
        s.push('}');
    }
    s.push_str(if rules.is_empty() { "]" } else { "\n]" });
    s
}

/// `{'a': true, 'b': true}`: a map, so that a membership test costs one
/// lookup however many names it holds.
fn set_literal<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let names: std::collections::BTreeSet<&str> = items.into_iter().collect();
    let mut s = String::from("{");
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{}: true", lit(name));
    }
    s.push('}');
    s
}

fn list_literal<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut s = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&lit(item));
    }
    s.push(']');
    s
}

/// A word of our own (never the policy's) as a double-quoted CEL string: on
/// one line, YAML then need not double the single quotes.
fn dq(word: &'static str) -> String {
    debug_assert!(word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    format!("\"{word}\"")
}

/// `s` as a single-quoted CEL string literal of printable ASCII: a quote,
/// a backslash and every other character escaped, so a name from the policy
/// can neither end the literal nor hide in the YAML.
pub fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('\'');
    out
}

/// Both objects as one YAML stream, after comments that say what they
/// decide and what they do not.
fn render(policy: &Policy, export: &Export) -> String {
    let mut out = String::new();
    let settings = &policy.override_settings;
    let _ = writeln!(
        out,
        "# finalizer-guard's policy as a ValidatingAdmissionPolicy: kube-apiserver decides it itself,\n\
         # with or without the webhook (Kubernetes 1.30 or later). Generated by\n\
         # `finalizer-guard policy export --vap`; export again when the policy changes.\n\
         #\n\
         # Decided here as the webhook decides it: which finalizers an UPDATE removes\n\
         # (metadata.finalizers, and a Namespace's spec.finalizers through namespaces/finalize),\n\
         # the {} rules, Kubernetes' own controllers (builtinControllers: {}, {} builtinIdentities),\n\
         # the override annotation {} with reasons {}\n\
         # and a visible DETAIL, requireDeletion: {}, and the mode: {} ({}).",
        policy.rules.len(),
        policy.builtin_controllers,
        policy.builtin_identities.len(),
        settings.annotation,
        settings.reasons.join(", "),
        settings.require_deletion,
        policy.mode.as_str(),
        match policy.mode {
            Mode::Enforce => "validationActions Deny and Audit",
            Mode::Warn => "validationActions Warn and Audit: nothing is denied",
        },
    );
    for entry in &settings.finalizers {
        let names: Vec<String> = entry.finalizers.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "#   {}: {} {}{}",
            entry.label,
            names.join(", "),
            if entry.never {
                "take no override: only their rule or controller".to_string()
            } else {
                format!(
                    "take only {}",
                    entry
                        .reasons
                        .as_deref()
                        .unwrap_or(&settings.reasons)
                        .join(", ")
                )
            },
            if entry.approval_required {
                ", approved by a second person (verified by the webhook alone: see below)"
            } else {
                ""
            }
        );
    }
    if settings.approval.is_some() {
        out.push_str(
            "#   override.approval: every override needs the two-person approval, which only the webhook\n\
             #   verifies (its seal and clock): here no override is taken, so this policy never allows a\n\
             #   removal the webhook denies, and while it is bound it denies the approved overrides the webhook\n\
             #   allows. Release such an object by a rule or built-in controller, or take the binding out\n\
             #   for the time it takes (kube-apiserver's audit log records that).\n",
        );
    }
    out.push_str("#\n# Not decided here, only by the webhook:\n");
    for line in NOT_EXPRESSED {
        let _ = writeln!(out, "#   - {line}");
    }
    let cost = estimated_cost(policy);
    let _ = writeln!(
        out,
        "#\n# Limits (README, \"Three ways to run the guard\"): each expression at most {MAX_EXPRESSION_CODE_POINTS} characters,\n\
         # finalizer lists of at most {MAX_FINALIZERS} names judged (a change of a longer one is refused), and\n\
         # kube-apiserver's CEL cost limit of {PER_CALL_COST_LIMIT} per expression: for this policy at most about {}\n\
         # ({} rules can cover one requester). An evaluation that fails is a refused write: failurePolicy Fail.",
        cost.cost, cost.rules,
    );
    out.push_str("---\n");
    out.push_str(&yaml_in_order(
        &export.policy,
        &[
            "failurePolicy",
            "matchConstraints",
            "matchConditions",
            "variables",
            "validations",
            "auditAnnotations",
        ],
    ));
    out.push_str("---\n");
    out.push_str(&yaml_in_order(
        &export.binding,
        &["policyName", "validationActions"],
    ));
    out
}

/// `object` as YAML, its `spec` keys in `order` (the order a reader follows:
/// what is matched, then how it is decided), any others after; in each
/// list item, the `name` or `key` first.
fn yaml_in_order<T: serde::Serialize>(object: &T, order: &[&str]) -> String {
    use serde_yaml_ng::{Mapping, Value};
    fn reorder(mapping: &mut Mapping, order: &[&str]) {
        let mut ordered = Mapping::new();
        for key in order {
            if let Some(v) = mapping.remove(*key) {
                ordered.insert(Value::from(*key), v);
            }
        }
        for (k, v) in std::mem::take(mapping) {
            ordered.insert(k, v);
        }
        *mapping = ordered;
    }
    let mut value = serde_yaml_ng::to_value(object).expect("Kubernetes objects serialize");
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_mapping_mut) {
        reorder(spec, order);
        for (_, v) in spec.iter_mut() {
            for item in v.as_sequence_mut().into_iter().flatten() {
                if let Some(item) = item.as_mapping_mut() {
                    reorder(item, &["name", "key"]);
                }
            }
        }
    }
    serde_yaml_ng::to_string(&value).expect("YAML values serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_printable_ascii_and_escape_quotes() {
        assert_eq!(lit("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(lit("d\u{e9}v\n\u{202e}"), r"'d\u00e9v\u000a\u202e'");
        assert_eq!(lit("\u{1F525}"), r"'\U0001f525'");
        for c in lit("x\u{0}\u{7f}\u{2028}\u{feff}'\"").chars() {
            assert!(c.is_ascii_graphic() || c == ' ', "{c:?}");
        }
    }

    #[test]
    fn the_limits_said_in_the_comments_are_the_constants() {
        assert!(
            NOT_EXPRESSED
                .iter()
                .any(|l| l.contains(&format!("longer than {MAX_FINALIZERS} names")))
        );
    }

    #[test]
    fn verify_takes_the_export_and_names_where_another_differs() {
        let p = Policy::from_yaml("mode: enforce\n").unwrap();
        let yaml = export_yaml(&p).unwrap();
        assert_eq!(verify(&p, &yaml), Ok(()));
        let warn = Policy::from_yaml("mode: warn\n").unwrap();
        assert_eq!(
            verify(&warn, &yaml),
            Err(VerifyError::Differs {
                object: "ValidatingAdmissionPolicy finalizer-guard".into(),
                at: "spec.auditAnnotations[9].valueExpression".into(),
            })
        );
        let policy_only = yaml.rsplit_once("---").unwrap().0;
        assert_eq!(
            verify(&p, policy_only),
            Err(VerifyError::Count { found: 1 })
        );
        assert!(matches!(verify(&p, "a: [b"), Err(VerifyError::Yaml(_))));
    }

    #[test]
    fn approval_is_exported_taking_no_override() {
        let p =
            Policy::from_yaml("override:\n  approval:\n    users: [a]\n    maxAge: 1h\n").unwrap();
        let yaml = export_yaml(&p).unwrap();
        assert!(yaml.contains(APPROVAL_NOT_HERE), "{yaml}");
        assert!(
            yaml.contains("#   override.approval: every override needs"),
            "{yaml}"
        );
    }
}
