//! The exported objects: the ValidatingAdmissionPolicy and its binding built
//! from [`super::cel`], refused when kube-apiserver could not decide them
//! faithfully, rendered as YAML with comments, and verified against a file.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::cel::{
    CHANGES_FINALIZERS, MAX_FINALIZERS, NAME, audit_annotations, denied_word, how_to_override, lit,
    message_expression, variables,
};
use crate::offline::difference::{MissingKey, first_difference};
use crate::policy::config::{FinalizerPattern, Mode, Policy, Rule};
use crate::policy::servable;

/// cel-go's parser refuses an expression longer than this many code points
/// (`parser.ExpressionSizeCodePointLimit`'s default, which kube-apiserver
/// keeps): the policy is refused at create time.
pub const MAX_EXPRESSION_CODE_POINTS: usize = 100_000;

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
    let variables = variables(policy);
    exportable(policy, &variables)?;
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
            spec: Some(spec(policy, variables)),
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

/// Refuses what kube-apiserver could not decide as the webhook does: a
/// policy `serve` refuses, an expression too long to parse, one that could
/// cost more than kube-apiserver allows.
fn exportable(policy: &Policy, variables: &[Variable]) -> Result<(), ExportError> {
    if let Err(blocked) = servable::servable(policy) {
        let names: Vec<String> = blocked.iter().map(ToString::to_string).collect();
        return Err(ExportError::BlocksBuiltinControllers(names.join("; ")));
    }
    for v in variables {
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
    Ok(())
}

/// What the policy matches (every UPDATE that changes a finalizer list) and
/// how it decides (the variables, the validation, the audit annotations).
fn spec(policy: &Policy, variables: Vec<Variable>) -> ValidatingAdmissionPolicySpec {
    ValidatingAdmissionPolicySpec {
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
    }
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
    let export = export(policy)?;
    let want = [
        ("ValidatingAdmissionPolicy", to_json(&export.policy)),
        ("ValidatingAdmissionPolicyBinding", to_json(&export.binding)),
    ];
    let documents: Vec<serde_json::Value> = crate::yaml::documents(yaml, &crate::yaml::POLICY)
        .map_err(|e| VerifyError::Yaml(e.to_string()))?;
    let found: Vec<serde_json::Value> = documents.into_iter().filter(|v| !v.is_null()).collect();
    if found.len() != want.len() {
        return Err(VerifyError::Count { found: found.len() });
    }
    for ((kind, want), found) in want.iter().zip(&found) {
        if let Some(at) = first_difference(want, found, "", MissingKey::AsIs) {
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

/// Both objects as one YAML stream, after comments that say what they
/// decide and what they do not.
fn render(policy: &Policy, export: &Export) -> String {
    let mut out = String::new();
    write_decided(&mut out, policy);
    write_not_decided(&mut out, policy);
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

/// The comment's first part: what is decided here as the webhook decides
/// it, with each `override.finalizers` entry and the two-person override.
fn write_decided(out: &mut String, policy: &Policy) {
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
}

/// The comment's second part: what only the webhook decides, and the limits
/// kube-apiserver holds this policy to.
fn write_not_decided(out: &mut String, policy: &Policy) {
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
    use super::super::cel::APPROVAL_NOT_HERE;
    use super::*;

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
