//! Whether a finalizer's owner looks alive, where the cluster can tell:
//! its nodes, the built-in controllers' leader leases, the pods of the
//! ServiceAccounts a rule names, the APIServices; read once per run.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{NamespaceStatus, Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, ListParams};
use kube::discovery::{Scope, verbs};
use serde::Serialize;

use super::object::{ObjectApi, segment};
use super::owner::Owner;
use super::read;
use super::select::{self, FoundObject, Resolver};
use crate::output::{chain, escape};

/// Whether the owner looks alive, where the cluster can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "why", rename_all = "kebab-case")]
pub enum Liveness {
    Alive(String),
    Gone(String),
    Unknown(String),
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Liveness::Alive(why) => write!(f, "yes: {why}"),
            Liveness::Gone(why) => write!(f, "no: {why}"),
            Liveness::Unknown(why) => write!(f, "cannot tell: {why}"),
        }
    }
}

/// What the cluster says about owners, read once per run.
pub struct Probe {
    client: Client,
    pub not_ready_for: Duration,
    nodes: HashMap<String, Liveness>,
    leases: HashMap<&'static str, Liveness>,
    service_accounts: HashMap<String, Liveness>,
    apiservices: Option<Vec<String>>,
    /// The namespaced types the API server serves (listable), or why not known.
    namespaced_types: Option<Result<Vec<ApiResource>, String>>,
}

impl Probe {
    pub fn new(client: Client, not_ready_for: Duration) -> Probe {
        Probe {
            client,
            not_ready_for,
            nodes: HashMap::new(),
            leases: HashMap::new(),
            service_accounts: HashMap::new(),
            apiservices: None,
            namespaced_types: None,
        }
    }

    /// Every namespaced type the API server serves that can be listed, by discovery.
    async fn namespaced_types(&mut self) -> Result<Vec<ApiResource>, String> {
        if let Some(types) = &self.namespaced_types {
            return types.clone();
        }
        let types = match Resolver::new(&self.client).await {
            Ok(resolver) => Ok(resolver
                .served()
                .into_iter()
                .filter(|(_, caps)| {
                    caps.scope == Scope::Namespaced && caps.supports_operation(verbs::LIST)
                })
                .map(|(ar, _)| ar)
                .collect()),
            Err(e) => Err(chain(&e)),
        };
        self.namespaced_types = Some(types.clone());
        types
    }

    /// What is still inside the namespace `ns`: every namespaced type
    /// listed there, metadata only.
    pub async fn contents(&mut self, ns: &str) -> Contents {
        let mut contents = Contents::default();
        let types = match self.namespaced_types().await {
            Ok(types) => types,
            Err(why) => {
                contents
                    .unread
                    .push(format!("the API server's types: {why}"));
                return contents;
            }
        };
        for resource in types {
            let type_name = read::type_name(&resource);
            let api = &ObjectApi::new(&self.client, &resource, Some(ns));
            let mut count = 0;
            let listed = read::pages(
                &ListParams::default(),
                |p| async move { api.list_metadata(&p).await },
                |item| {
                    count += 1;
                    let meta = item.metadata;
                    let finalizers = meta.finalizers.unwrap_or_default();
                    if finalizers.is_empty() {
                        return;
                    }
                    let object = format!("{type_name}/{}", meta.name.unwrap_or_default());
                    contents.holding.push(Holding {
                        command: select::command(
                            "unstick",
                            &object,
                            Some(ns),
                            &["--reason", "REASON", "--detail", "TEXT"],
                        ),
                        object,
                        deleting: meta.deletion_timestamp.is_some(),
                        finalizers,
                    });
                },
            )
            .await;
            if count > 0 {
                contents.remaining.insert(type_name.clone(), count);
            }
            if let Err(e) = listed {
                contents.unread.push(format!("{type_name}: {}", chain(&e)));
            }
        }
        contents
    }

    /// A node: gone when absent, or NotReady for longer than `not_ready_for`.
    pub async fn node(&mut self, name: &str) -> Liveness {
        if let Some(l) = self.nodes.get(name) {
            return l.clone();
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let got = api.get_opt(&segment(name)).await;
        let liveness = match got {
            Ok(Some(node)) if node.metadata.name.as_deref() != Some(name) => Liveness::Unknown(
                format!("asked for node {name}, the API server answered with another"),
            ),
            Ok(None) => Liveness::Gone(format!("node {name} does not exist")),
            Ok(Some(node)) => self.node_liveness(name, &node),
            Err(kube::Error::Api(status)) if status.code == 403 => Liveness::Unknown(format!(
                "you may not read node {name} ({}): whether it is dead takes get on nodes (the on-call role grants it)",
                status.message
            )),
            Err(e) => Liveness::Unknown(format!("cannot read node {name}: {}", chain(&e))),
        };
        self.nodes.insert(name.to_string(), liveness.clone());
        liveness
    }

    fn node_liveness(&self, name: &str, node: &Node) -> Liveness {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let now = Timestamp::now();
        match ready {
            Some(c) if c.status == "True" => Liveness::Alive(format!("node {name} is Ready")),
            Some(c) => {
                let since = c
                    .last_transition_time
                    .as_ref()
                    .map(|t| t.0)
                    .or_else(|| node.metadata.creation_timestamp.as_ref().map(|t| t.0));
                let state = format!("Ready={}", c.status);
                not_ready(self.not_ready_for, name, &state, since, now)
            }
            None => {
                let since = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
                not_ready(self.not_ready_for, name, "never reported Ready", since, now)
            }
        }
    }

    /// A control-plane component, by its leader-election Lease in kube-system.
    async fn lease(&mut self, component: &'static str) -> Liveness {
        if let Some(l) = self.leases.get(component) {
            return l.clone();
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-system");
        let liveness = match api.get_opt(component).await {
            Ok(Some(lease)) => {
                let spec = lease.spec.unwrap_or_default();
                let renewed = spec.renew_time.map(|t| t.0);
                let duration = Duration::from_secs(
                    spec.lease_duration_seconds
                        .unwrap_or(15)
                        .max(1)
                        .unsigned_abs()
                        .into(),
                );
                match renewed {
                    Some(t) => {
                        let ago = Timestamp::now().duration_since(t).unsigned_abs();
                        if ago <= duration * 2 {
                            Liveness::Alive(format!(
                                "{component} holds its lease (renewed {} ago)",
                                age(ago)
                            ))
                        } else {
                            Liveness::Gone(format!(
                                "{component}'s lease was last renewed {} ago",
                                age(ago)
                            ))
                        }
                    }
                    None => Liveness::Unknown(format!("{component}'s lease has no renewTime")),
                }
            }
            Ok(None) => Liveness::Unknown(format!("no lease kube-system/{component}")),
            Err(e) => Liveness::Unknown(format!(
                "cannot read lease kube-system/{component}: {}",
                chain(&e)
            )),
        };
        self.leases.insert(component, liveness.clone());
        liveness
    }

    /// A controller by its ServiceAccount: does a Ready pod run as it?
    async fn service_account(&mut self, username: &str) -> Option<Liveness> {
        let rest = username.strip_prefix("system:serviceaccount:")?;
        let (ns, name) = rest.split_once(':')?;
        if let Some(l) = self.service_accounts.get(username) {
            return Some(l.clone());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let params = ListParams::default().fields(&format!("spec.serviceAccountName={name}"));
        let liveness = match api.list(&params).await {
            Ok(pods) => service_account_liveness(ns, name, &pods.items),
            Err(e) => Liveness::Unknown(format!("cannot list pods in {ns}: {}", chain(&e))),
        };
        self.service_accounts
            .insert(username.to_string(), liveness.clone());
        Some(liveness)
    }

    /// APIServices that are not Available: what blocks a namespace's deletion.
    pub async fn unavailable_apiservices(&mut self) -> Vec<String> {
        if let Some(list) = &self.apiservices {
            return list.clone();
        }
        let list = match read::unavailable_apiservices(&self.client).await {
            Ok(down) => down
                .iter()
                .map(|d| format!("APIService {} is {d}", d.name))
                .collect(),
            Err(e) => vec![format!("cannot list APIServices: {}", chain(&e))],
        };
        self.apiservices = Some(list.clone());
        list
    }

    /// Whether the owner of `finalizer` on `found` looks alive.
    pub async fn owner_alive(&mut self, found: &FoundObject, owner: &Owner) -> Liveness {
        match owner {
            Owner::Builtin { runs_in, .. } if *runs_in == "kube-apiserver" => {
                Liveness::Alive("kube-apiserver answers".into())
            }
            Owner::Builtin { runs_in, .. } => self.lease(runs_in).await,
            // A pod's other finalizers belong to agents on its node.
            _ if found.resource.plural == "pods" && found.resource.group.is_empty() => {
                match found.object.data["spec"]["nodeName"].as_str() {
                    Some(node) if !node.is_empty() => self.node(node).await,
                    _ => Liveness::Unknown("the pod is not bound to a node".into()),
                }
            }
            Owner::Rules { rules } => {
                let mut seen = Vec::new();
                let service_accounts = rules
                    .iter()
                    .flat_map(|r| &r.identities)
                    .filter_map(|id| id.strip_prefix("serviceaccount:"))
                    .take(SERVICE_ACCOUNTS_PROBED);
                for sa in service_accounts {
                    let username = format!("system:serviceaccount:{sa}");
                    if let Some(l) = self.service_account(&username).await {
                        if matches!(l, Liveness::Alive(_)) {
                            return l;
                        }
                        seen.push(l);
                    }
                }
                // A controller seen not Ready says no; one not seen at all,
                // or a person or group, cannot be told from here.
                let gone = seen.iter().position(|l| matches!(l, Liveness::Gone(_)));
                match gone {
                    Some(i) => seen.swap_remove(i),
                    None => seen.into_iter().next().unwrap_or_else(|| {
                        let others: Vec<&str> = rules
                            .iter()
                            .flat_map(|r| &r.identities)
                            .map(String::as_str)
                            .take(3)
                            .collect();
                        Liveness::Unknown(format!(
                            "its rules name {}, not a ServiceAccount whose pods can be seen (runs outside the cluster?)",
                            others.join(", ")
                        ))
                    }),
                }
            }
            Owner::Elsewhere { .. } => {
                Liveness::Unknown("no rule lets anyone remove it here".into())
            }
            Owner::Unknown => Liveness::Unknown("no owner is known".into()),
        }
    }
}

/// ServiceAccounts a finalizer's rules name whose pods are looked for.
const SERVICE_ACCOUNTS_PROBED: usize = 4;

/// Whether a controller running as ServiceAccount `ns`:`name` looks alive
/// by `pods`, the pods in `ns` that run as it, saying what was looked at:
/// alive when one is Ready, not when some are and none is Ready, and
/// unknown when there are none: the controller may run outside the cluster
/// (a kubeconfig with the ServiceAccount's token, a CI job).
fn service_account_liveness(ns: &str, name: &str, pods: &[Pod]) -> Liveness {
    let ready = pods.iter().filter(|p| pod_ready(p)).count();
    if ready > 0 {
        Liveness::Alive(format!(
            "{ready} Ready pod(s) in {ns} run as ServiceAccount {name}"
        ))
    } else if pods.is_empty() {
        Liveness::Unknown(format!(
            "no pod in {ns} runs as ServiceAccount {name} (runs outside the cluster?)"
        ))
    } else {
        Liveness::Gone(format!(
            "no Ready pod in {ns} runs as ServiceAccount {name} ({} pod(s), none Ready)",
            pods.len()
        ))
    }
}

/// A node NotReady (`state`) since `since`: gone once that lasted
/// `not_ready_for`, else not known to be.
fn not_ready(
    not_ready_for: Duration,
    name: &str,
    state: &str,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Liveness {
    let Some(since) = since else {
        return Liveness::Unknown(format!("node {name} {state}, since an unknown time"));
    };
    let for_ = now.duration_since(since).unsigned_abs();
    if for_ >= not_ready_for {
        Liveness::Gone(format!(
            "node {name} {state} for {} (past --not-ready-for {})",
            age(for_),
            age(not_ready_for)
        ))
    } else {
        Liveness::Unknown(format!(
            "node {name} {state} for only {} (--not-ready-for {})",
            age(for_),
            age(not_ready_for)
        ))
    }
}

/// What ends a pod's deletion once no finalizer holds it: its kubelet
/// confirms it, unless its node is dead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "why", rename_all = "kebab-case")]
pub enum Kubelet {
    /// The node looks alive: its kubelet finishes the deletion.
    Finishes(String),
    /// The node is dead: no kubelet will confirm it; only a deletion with
    /// grace period 0 (`--force-delete`) ends it.
    Dead(String),
    /// Whether the node is dead cannot be told: why, and what would tell.
    CannotTell(String),
}

impl Kubelet {
    /// From what the cluster says about the pod's node.
    pub fn of(node: &Liveness) -> Kubelet {
        match node {
            Liveness::Alive(why) => Kubelet::Finishes(why.clone()),
            Liveness::Gone(why) => Kubelet::Dead(why.clone()),
            Liveness::Unknown(why) => Kubelet::CannotTell(why.clone()),
        }
    }

    /// What `unstick` does about a pod whose finalizers are all gone:
    /// `None` when its kubelet will finish it (nothing is left to do),
    /// else whether it is force-deleted or why it is left Terminating.
    pub fn finish(&self, force_delete: bool) -> Option<Finish> {
        Some(match self {
            Kubelet::Finishes(_) => return None,
            Kubelet::Dead(_) if force_delete => Finish::ForceDelete,
            Kubelet::Dead(why) => Finish::Leave(format!(
                "no finalizer holds it, but its node is dead ({why}): no kubelet will confirm its deletion; --force-delete finishes it (grace period 0)"
            )),
            Kubelet::CannotTell(why) => Finish::Leave(format!(
                "no finalizer holds it, and whether its node is dead cannot be told ({why}): not force-deleted"
            )),
        })
    }
}

/// What becomes of a pod no finalizer holds whose kubelet will not finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Delete it with grace period 0.
    ForceDelete,
    /// Left Terminating: why.
    Leave(String),
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `3d4h`, `12m`, `40s`: as kubectl prints ages.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// What is still inside a namespace being deleted: what removing its own
/// `kubernetes` finalizer would orphan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Contents {
    /// Objects still inside, counted by type (`widgets.example.com`).
    pub remaining: BTreeMap<String, usize>,
    /// Those that hold finalizers, each with the command that releases it.
    pub holding: Vec<Holding>,
    /// What could not be listed: its objects are not counted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

/// An object inside a stuck namespace that holds finalizers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holding {
    /// `widgets.example.com/w1`
    pub object: String,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `finalizer-guard unstick widgets.example.com/w1 -n NS --reason REASON --detail TEXT`
    pub command: String,
}

impl Contents {
    pub fn total(&self) -> usize {
        self.remaining.values().sum()
    }

    /// `3 object(s) (configmaps 2, widgets.example.com 1)`, and what was not read.
    pub fn summary(&self) -> String {
        let counted = if self.remaining.is_empty() {
            "no object".to_string()
        } else {
            let each: Vec<String> = self
                .remaining
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect();
            format!("{} object(s) ({})", self.total(), each.join(", "))
        };
        if self.unread.is_empty() {
            counted
        } else {
            format!(
                "{counted}, and what could not be listed: {}",
                self.unread.join("; ")
            )
        }
    }

    /// The lines that show them, each holder with its command.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!("  still inside: {}", self.summary())];
        if !self.holding.is_empty() {
            lines.push(format!(
                "  holding finalizers ({}), each released by its own command:",
                self.holding.len()
            ));
        }
        for h in &self.holding {
            let not_deleting = if h.deleting {
                ""
            } else {
                " [not being deleted]"
            };
            lines.push(format!(
                "    {} ({}){not_deleting}: {}",
                escape(&h.object),
                escape(&h.finalizers.join(", ")),
                h.command
            ));
        }
        lines
    }
}

/// The namespace's own finalizer in `spec.finalizers`: the namespace
/// controller removes it once the namespace is empty. Removed by hand, what
/// is still inside is orphaned.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Why a namespace is stuck: its own conditions, and unavailable APIServices.
pub async fn namespace_blockers(probe: &mut Probe, found: &FoundObject) -> Vec<String> {
    if !found.is_namespace() {
        return Vec::new();
    }
    // A status that does not read as a Namespace's says nothing.
    let status: NamespaceStatus =
        serde_json::from_value(found.object.data["status"].clone()).unwrap_or_default();
    let mut out: Vec<String> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}: {}", c.type_, c.message.unwrap_or_default()))
        .collect();
    out.extend(probe.unavailable_apiservices().await);
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    /// Owner alive says what it looked at, and a controller it cannot see
    /// (no pod runs as its ServiceAccount) is unknown, never "no".
    #[test]
    fn owner_alive_says_what_it_looked_at() {
        let pod_of = |ready: &str| -> Pod {
            serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "flux-system"},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
            )
            .unwrap()
        };
        let table = [
            (
                vec![pod_of("True"), pod_of("False")],
                "yes: 1 Ready pod(s) in flux-system run as ServiceAccount source-controller",
            ),
            (
                vec![pod_of("False")],
                "no: no Ready pod in flux-system runs as ServiceAccount source-controller (1 pod(s), none Ready)",
            ),
            (
                Vec::new(),
                "cannot tell: no pod in flux-system runs as ServiceAccount source-controller (runs outside the cluster?)",
            ),
        ];
        for (pods, want) in table {
            assert_eq!(
                service_account_liveness("flux-system", "source-controller", &pods).to_string(),
                want
            );
        }
    }

    #[test]
    fn a_pod_no_finalizer_holds_is_force_deleted_only_when_its_node_is_dead() {
        let alive = Kubelet::of(&Liveness::Alive("node n1 is Ready".into()));
        let dead = Kubelet::of(&Liveness::Gone(
            "node n1 Ready=Unknown for 1h0m (past --not-ready-for 5m)".into(),
        ));
        let unknown = Kubelet::of(&Liveness::Unknown(
            "you may not read node n1 (nodes \"n1\" is forbidden): whether it is dead takes get on nodes (the on-call role grants it)".into(),
        ));
        // Alive: its kubelet finishes it, with or without --force-delete.
        assert_eq!(alive.finish(true), None);
        assert_eq!(alive.finish(false), None);
        assert_eq!(dead.finish(true), Some(Finish::ForceDelete));
        match dead.finish(false) {
            Some(Finish::Leave(why)) => {
                assert!(why.contains("its node is dead"), "{why}");
                assert!(why.contains("--force-delete finishes it"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // Cannot tell: never force-deleted, and why is said, permission included.
        for force in [true, false] {
            match unknown.finish(force) {
                Some(Finish::Leave(why)) => {
                    assert!(why.contains("cannot be told"), "{why}");
                    assert!(why.contains("get on nodes"), "{why}");
                    assert!(why.ends_with("not force-deleted"), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
        // A node NotReady for less than --not-ready-for cannot be called dead.
        let five_minutes = Duration::from_secs(300);
        let now = Timestamp::now();
        let since = now - jiff::SignedDuration::from_secs(60);
        let liveness = not_ready(five_minutes, "n1", "Ready=Unknown", Some(since), now);
        assert!(
            matches!(Kubelet::of(&liveness), Kubelet::CannotTell(_)),
            "{liveness:?}"
        );
        let since = now - jiff::SignedDuration::from_secs(600);
        let liveness = not_ready(five_minutes, "n1", "Ready=Unknown", Some(since), now);
        assert!(
            matches!(Kubelet::of(&liveness), Kubelet::Dead(_)),
            "{liveness:?}"
        );
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let s = Duration::from_secs;
        assert_eq!(age(s(40)), "40s");
        assert_eq!(age(s(600)), "10m");
        assert_eq!(age(s(3 * 3600 + 60)), "3h1m");
        assert_eq!(age(s(3 * 86_400 + 7200)), "3d2h");
    }
}
