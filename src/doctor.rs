//! `doctor`: would this policy block Kubernetes' own controllers?
//!
//! Every built-in controller, under each username it runs as, removes each of
//! its own finalizers through the server's own code path. A policy that denies
//! any of them would leave namespaces, volumes or Jobs stuck cluster-wide.

use serde_json::{Value, json};

use crate::admission;
use crate::policy::Policy;
use crate::policy::builtin::{BUILTIN_CONTROLLERS, BuiltinController, KUBE_CONTROLLER_MANAGER};

/// One built-in removal the policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub controller: &'static str,
    pub username: &'static str,
    pub finalizer: &'static str,
    pub resource: &'static str,
    /// The decision: `denied`, `would-deny`, or the error.
    pub decision: String,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} controller ({}) removing finalizer {:?} from {}: {}",
            self.controller, self.username, self.finalizer, self.resource, self.decision
        )
    }
}

/// Every built-in removal the policy denies (or, in warn mode, would deny).
pub fn check(policy: &Policy) -> Vec<Blocked> {
    let mut blocked = Vec::new();
    for controller in BUILTIN_CONTROLLERS {
        let usernames = controller
            .usernames
            .iter()
            .copied()
            .chain(std::iter::once(KUBE_CONTROLLER_MANAGER));
        for username in usernames {
            for finalizer in controller.finalizers {
                let body = review(controller, username, finalizer);
                let decision = match admission::review(policy, &body) {
                    Ok(r) if r.decision == "authorized" => continue,
                    Ok(r) => r.decision.to_string(),
                    Err(e) => format!("error: {e}"),
                };
                blocked.push(Blocked {
                    controller: controller.name,
                    username,
                    finalizer,
                    resource: controller.example_resource,
                    decision,
                });
            }
        }
    }
    blocked
}

/// The UPDATE the controller sends when it is done: its finalizer removed.
fn review(controller: &BuiltinController, username: &str, finalizer: &str) -> Vec<u8> {
    let (resource, group) = controller
        .example_resource
        .split_once('.')
        .unwrap_or((controller.example_resource, ""));
    let cluster_scoped = matches!(
        resource,
        "persistentvolumes"
            | "namespaces"
            | "servicecidrs"
            | "volumeattributesclasses"
            | "customresourcedefinitions"
    );
    let namespace = if resource == "namespaces" {
        Value::from("doctor")
    } else if cluster_scoped {
        Value::Null
    } else {
        Value::from("doctor")
    };
    let spec = resource == "namespaces";
    let object = |finalizers: Vec<&str>| {
        if spec {
            json!({"metadata": {"name": "doctor"}, "spec": {"finalizers": finalizers}})
        } else {
            json!({"metadata": {"name": "doctor", "namespace": namespace, "finalizers": finalizers}})
        }
    };
    let gvr = json!({"group": group, "version": "v1", "resource": resource});
    // The groups a real token carries.
    let groups = match username
        .strip_prefix("system:serviceaccount:")
        .and_then(|sa| sa.split_once(':'))
    {
        Some((ns, _)) => json!([
            "system:serviceaccounts",
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated"
        ]),
        None => json!(["system:authenticated"]),
    };
    let request = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-000000000000",
            "kind": {"group": group, "version": "v1", "kind": "Object"},
            "resource": gvr,
            "subResource": if spec { Value::from("finalize") } else { Value::Null },
            "name": "doctor",
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {"username": username, "groups": groups},
            "object": object(vec![]),
            "oldObject": object(vec![finalizer]),
            "dryRun": true,
        }
    });
    serde_json::to_vec(&request).expect("a review always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_blocks_no_builtin_controller() {
        assert_eq!(check(&Policy::embedded_default()), vec![]);
    }

    #[test]
    fn switching_builtins_off_without_rules_blocks_them_all() {
        let p = Policy::from_yaml("builtinControllers: false\n").unwrap();
        let blocked = check(&p);
        let expected: usize = BUILTIN_CONTROLLERS
            .iter()
            .map(|c| (c.usernames.len() + 1) * c.finalizers.len())
            .sum();
        assert_eq!(blocked.len(), expected);
        let gc = blocked
            .iter()
            .find(|b| b.controller == "garbage-collector" && b.finalizer == "orphan")
            .unwrap();
        assert_eq!(
            gc.to_string(),
            "garbage-collector controller (system:serviceaccount:kube-system:generic-garbage-collector) removing finalizer \"orphan\" from deployments.apps: denied"
        );
    }

    #[test]
    fn rules_can_stand_in_for_the_builtin_table() {
        let p = Policy::from_yaml(
            "builtinControllers: false\nrules:\n  - finalizers: [\"*\"]\n    users: [system:kube-controller-manager, system:apiserver, system:cloud-controller-manager]\n    groups: [system:serviceaccounts:kube-system]\n",
        )
        .unwrap();
        assert_eq!(check(&p), vec![]);
    }
}
