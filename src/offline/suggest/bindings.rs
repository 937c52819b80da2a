//! What `--bindings` says of the ServiceAccounts: which ClusterRoleBinding
//! lets one update a resource in every namespace.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::evidence::{strings, text};

/// What `kubectl get clusterroles,clusterrolebindings -o json` says of the
/// ServiceAccounts: which ClusterRoleBinding lets one update a resource in
/// every namespace. RoleBindings grant one namespace and are not read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Bindings {
    /// ClusterRole name -> its rules.
    roles: BTreeMap<String, Vec<RbacRule>>,
    /// ServiceAccount `NS:NAME` -> (ClusterRoleBinding, ClusterRole).
    bound: BTreeMap<String, BTreeSet<(String, String)>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct RbacRule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    /// `resourceNames`: a rule for some objects only.
    names: bool,
}

impl Bindings {
    /// Reads a List (or one object) of ClusterRoles and ClusterRoleBindings;
    /// `Err` when it holds neither.
    pub fn from_json(value: &Value) -> Result<Bindings, String> {
        let mut out = Bindings::default();
        let items: Vec<&Value> = match value["items"].as_array() {
            Some(items) => items.iter().collect(),
            None => vec![value],
        };
        let mut read = 0;
        for item in items {
            let name = text(&item["metadata"]["name"]);
            match item["kind"].as_str() {
                Some("ClusterRole") => {
                    let rules = item["rules"].as_array().into_iter().flatten();
                    let rules = rules.map(|r| RbacRule {
                        groups: strings(&r["apiGroups"]),
                        resources: strings(&r["resources"]),
                        verbs: strings(&r["verbs"]),
                        names: !strings(&r["resourceNames"]).is_empty(),
                    });
                    out.roles.insert(name, rules.collect());
                    read += 1;
                }
                Some("ClusterRoleBinding") => {
                    read += 1;
                    if item["roleRef"]["kind"] != "ClusterRole" {
                        continue;
                    }
                    let role = text(&item["roleRef"]["name"]);
                    for subject in item["subjects"].as_array().into_iter().flatten() {
                        if subject["kind"] == "ServiceAccount" {
                            let sa = format!(
                                "{}:{}",
                                text(&subject["namespace"]),
                                text(&subject["name"])
                            );
                            let pair = (name.clone(), role.clone());
                            out.bound.entry(sa).or_default().insert(pair);
                        }
                    }
                }
                _ => {}
            }
        }
        if read == 0 {
            return Err("neither ClusterRoles nor ClusterRoleBindings in it (kubectl get clusterroles,clusterrolebindings -o json)".into());
        }
        Ok(out)
    }

    /// The first ClusterRoleBinding (by name) that lets ServiceAccount
    /// `sa` (`NS:NAME`) update or patch every object of `resource`
    /// (`resource` or `resource.group`).
    pub fn cluster_wide(&self, sa: &str, resource: &str) -> Option<&str> {
        let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        self.bound.get(sa)?.iter().find_map(|(binding, role)| {
            let rules = self.roles.get(role)?;
            rules
                .iter()
                .any(|r| {
                    !r.names
                        && any(&r.groups, group)
                        && any(&r.resources, plural)
                        && (any(&r.verbs, "update") || any(&r.verbs, "patch"))
                })
                .then_some(binding.as_str())
        })
    }

    /// ClusterRoleBindings of ServiceAccounts whose ClusterRole was not
    /// given: what they grant is not known, so they make nothing cluster-wide.
    pub fn unknown_roles(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .bound
            .values()
            .flatten()
            .filter(|(_, role)| !self.roles.contains_key(role))
            .map(|(b, r)| (b.as_str(), r.as_str()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cluster_role_bindings_read_as_kubectl_prints_them() {
        let role = |name: &str, rules: Value| json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules});
        let binding = |name: &str, role: &str, ns: &str, sa: &str| {
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
        };
        let list = json!({"kind": "List", "items": [
            role("writer", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "patch"]}])),
            role("reader", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}])),
            role("named", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "resourceNames": ["w1"], "verbs": ["update"]}])),
            role("finalizers-only", json!([{"apiGroups": ["example.com"], "resources": ["widgets/finalizers"], "verbs": ["update"]}])),
            role("everything", json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])),
            binding("b-writer", "writer", "ops", "writer"),
            binding("b-reader", "reader", "ops", "reader"),
            binding("b-named", "named", "ops", "named"),
            binding("b-finalizers", "finalizers-only", "ops", "finalizers"),
            binding("b-admin", "everything", "ops", "admin"),
            binding("b-missing", "not-given", "ops", "missing"),
            {"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ops"}, "roleRef": {"kind": "ClusterRole", "name": "everything"},
             "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "ops"}]},
        ]});
        let b = Bindings::from_json(&list).unwrap();
        let table = [
            ("ops:writer", "widgets.example.com", Some("b-writer")),
            ("ops:writer", "gadgets.example.com", None),
            ("ops:reader", "widgets.example.com", None),
            ("ops:named", "widgets.example.com", None),
            ("ops:finalizers", "widgets.example.com", None),
            ("ops:admin", "pods", Some("b-admin")),
            ("ops:missing", "widgets.example.com", None),
            // A RoleBinding grants one namespace: not read.
            ("ops:tenant", "widgets.example.com", None),
            ("other:writer", "widgets.example.com", None),
        ];
        for (sa, resource, want) in table {
            assert_eq!(b.cluster_wide(sa, resource), want, "{sa} {resource}");
        }
        assert_eq!(b.unknown_roles(), [("b-missing", "not-given")]);
        assert!(Bindings::from_json(&json!({"kind": "List", "items": []})).is_err());
        assert!(Bindings::from_json(&json!({"kind": "ConfigMap"})).is_err());
    }
}
