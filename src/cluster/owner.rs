//! Who owns a finalizer: a built-in controller, a rule of the policy (here,
//! or only elsewhere), or nobody known.

use serde::Serialize;

use super::select::FoundObject;
use crate::policy::builtin::{self, BuiltinController};
use crate::policy::{self, FinalizerField, Policy, Target};

/// Who owns a finalizer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Owner {
    /// One of Kubernetes' own controllers.
    Builtin {
        controller: &'static str,
        #[serde(rename = "runsIn")]
        runs_in: &'static str,
    },
    /// The policy's rules that let someone remove it here.
    Rules {
        rules: Vec<RuleOwner>,
    },
    /// No rule covers it here, but these rules name it for some identity
    /// in other namespaces or on other resources: the fix is to widen one.
    Elsewhere {
        rules: Vec<RuleElsewhere>,
    },
    Unknown,
}

/// A rule that names a finalizer, scoped away from where it lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleElsewhere {
    pub rule: String,
    /// `user:NAME`, `group:NAME`, `serviceaccount:NS:NAME`.
    pub identities: Vec<String>,
    /// The rule's namespaces, when they leave this object out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// The rule's resources, when they leave this object's type out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

/// Rules named in an owner line, and namespaces or resources named per rule.
const ELSEWHERE_SHOWN: usize = 3;
const PLACES_SHOWN: usize = 5;

fn first_few(items: &[String], n: usize) -> String {
    let mut out = items.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > n {
        out.push_str(&format!(" and {} more", items.len() - n));
    }
    out
}

impl std::fmt::Display for RuleElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who: Vec<String> = self
            .identities
            .iter()
            .map(|id| {
                if let Some(sa) = id.strip_prefix("serviceaccount:") {
                    format!("ServiceAccount {sa}")
                } else if let Some(u) = id.strip_prefix("user:") {
                    format!("user {u}")
                } else if let Some(g) = id.strip_prefix("group:") {
                    format!("group {g}")
                } else {
                    id.clone()
                }
            })
            .collect();
        let mut places = Vec::new();
        let mut widen = Vec::new();
        if let Some(ns) = &self.namespaces {
            places.push(format!("in {}", first_few(ns, PLACES_SHOWN)));
            widen.push("namespaces");
        }
        if let Some(r) = &self.resources {
            places.push(format!("on {}", first_few(r, PLACES_SHOWN)));
            widen.push("resources");
        }
        write!(
            f,
            "rule {} lets {} remove it {} but not here: widen the rule ({}) rather than override",
            self.rule,
            first_few(&who, PLACES_SHOWN),
            places.join(" "),
            widen.join(", ")
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleOwner {
    pub rule: String,
    /// `user:NAME`, `group:NAME`, `serviceaccount:NS:NAME`.
    pub identities: Vec<String>,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Builtin {
                controller,
                runs_in,
            } => write!(f, "built-in controller {controller} ({runs_in})"),
            Owner::Rules { rules } => {
                let parts: Vec<String> = rules
                    .iter()
                    .map(|r| format!("rule {} ({})", r.rule, r.identities.join(", ")))
                    .collect();
                f.write_str(&parts.join("; "))
            }
            Owner::Elsewhere { rules } => {
                let parts: Vec<String> = rules.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join("; "))
            }
            Owner::Unknown => {
                f.write_str("unknown: no built-in controller or policy rule names it")
            }
        }
    }
}

/// The admission target a removal of `field` from `found` is written to.
pub fn target_of(found: &FoundObject, field: FinalizerField) -> Target<'_> {
    Target {
        group: &found.resource.group,
        resource: &found.resource.plural,
        subresource: field.subresource(),
        namespace: if found.is_namespace() {
            found.object.metadata.name.as_deref()
        } else {
            found.namespace()
        },
        name: found.name(),
    }
}

/// Who owns `finalizer` on `found`, by the built-in table and the policy.
pub fn owner(
    policy: &Policy,
    found: &FoundObject,
    finalizer: &str,
    field: FinalizerField,
) -> Owner {
    owner_at(policy, &target_of(found, field), finalizer, field)
}

/// Who may remove `finalizer` where `target` says it is written: the
/// built-in controller that owns it, else the policy rules covering it there.
pub fn owner_at(
    policy: &Policy,
    target: &Target<'_>,
    finalizer: &str,
    field: FinalizerField,
) -> Owner {
    if policy.builtin_controllers
        && let Some(c) = builtin::owners_of(finalizer, field).next()
    {
        return Owner::Builtin {
            controller: c.name,
            runs_in: runs_in(c),
        };
    }
    let rules = policy::rules_for(policy, target, finalizer);
    if rules.is_empty() {
        return elsewhere(policy, target, finalizer);
    }
    Owner::Rules {
        rules: rules
            .into_iter()
            .map(|r| RuleOwner {
                rule: r.label.clone(),
                identities: identities(r),
            })
            .collect(),
    }
}

/// `user:NAME`, `group:NAME`, `serviceaccount:NS:NAME`: whom `rule` names.
fn identities(rule: &crate::policy::config::Rule) -> Vec<String> {
    rule.users
        .iter()
        .map(|u| format!("user:{u}"))
        .chain(rule.groups.iter().map(|g| format!("group:{g}")))
        .chain(rule.service_accounts.iter().map(|sa| {
            format!(
                "serviceaccount:{}",
                sa.strip_prefix("system:serviceaccount:").unwrap_or(sa)
            )
        }))
        .collect()
}

/// No rule covers `finalizer` where `target` says: the rules that name it
/// elsewhere (other namespaces, other resources), or `Unknown`.
fn elsewhere(policy: &Policy, target: &Target<'_>, finalizer: &str) -> Owner {
    let rules: Vec<RuleElsewhere> = policy
        .rules
        .iter()
        .filter(|r| r.finalizers.iter().any(|p| p.matches(finalizer)))
        .take(ELSEWHERE_SHOWN)
        .map(|r| {
            let namespaces = r.namespaces.clone().filter(|ns| {
                target
                    .object_namespace()
                    .is_none_or(|here| !ns.iter().any(|n| n == here))
            });
            let resources = r
                .resources
                .as_ref()
                .filter(|rs| !rs.iter().any(|x| x.matches(target.group, target.resource)))
                .map(|rs| {
                    rs.iter()
                        .map(|x| match x.group.as_str() {
                            "" => x.resource.clone(),
                            g => format!("{}.{g}", x.resource),
                        })
                        .collect()
                });
            RuleElsewhere {
                rule: r.label.clone(),
                identities: identities(r),
                namespaces,
                resources,
            }
        })
        .collect();
    if rules.is_empty() {
        Owner::Unknown
    } else {
        Owner::Elsewhere { rules }
    }
}

/// Where a built-in controller runs, by the name of its leader lease.
pub(super) fn runs_in(controller: &BuiltinController) -> &'static str {
    match controller.name {
        "customresourcedefinition-finalizer" => "kube-apiserver",
        "service" => "cloud-controller-manager",
        "kube-scheduler" => "kube-scheduler",
        _ => "kube-controller-manager",
    }
}
