//! For each finalizer of a stuck object: who owns it, whether the owner
//! looks alive, what may leak, and whether you may remove it under the policy.

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
use super::read;
use super::select::Found;
use super::select::{self, Resolver};
use super::session::SessionUser;
use crate::admission::lean::ledger_of;
use crate::admission::ledger::Ledger;
use crate::output::{chain, escape};
use crate::policy::builtin::{self, BuiltinController};
use crate::policy::{
    self, Accepts, Change, FinalizerField, FinalizerLists, Outcome, OverrideProblem, Policy,
    Requester, Target, approval,
};

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

/// Whether the person running the command may remove the finalizer, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum Removable {
    /// A rule or a built-in controller authorizes you.
    Authorized { by: String },
    /// With an override annotation you write: `--reason R --detail T`.
    WithOverride {
        annotation: String,
        reasons: Vec<String>,
    },
    /// Two-person rule: with the approval already on the object.
    WithApproval {
        #[serde(rename = "approvedBy")]
        approved_by: String,
        expires: String,
    },
    /// Two-person rule: an approver must approve first (or again), with
    /// one of `reasons` (those that release this finalizer).
    NeedsApproval {
        why: String,
        approvers: String,
        reasons: Vec<String>,
    },
    /// Not while the object is not being deleted.
    NotDeleting,
    /// Something else in the policy refuses it.
    No { why: String },
}

impl std::fmt::Display for Removable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removable::Authorized { by } => write!(f, "yes, authorized by {by}"),
            Removable::WithOverride {
                annotation,
                reasons,
            } => write!(
                f,
                "only with an override ({annotation}): --reason {} --detail TEXT",
                reasons.join("|")
            ),
            Removable::WithApproval {
                approved_by,
                expires,
            } => write!(
                f,
                "yes, with the approval by {approved_by} (expires {expires})"
            ),
            Removable::NeedsApproval {
                why,
                approvers,
                reasons,
            } => write!(
                f,
                "not yet: {why}; an approver ({approvers}) runs `finalizer-guard approve --reason {}`",
                reasons.join("|")
            ),
            Removable::NotDeleting => f.write_str(
                "no: the object is not being deleted (an override releases only a Terminating object)",
            ),
            Removable::No { why } => write!(f, "no: {why}"),
        }
    }
}

/// One finalizer, explained.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerReport {
    pub name: String,
    pub field: FinalizerField,
    pub owner: Owner,
    pub owner_alive: Liveness,
    pub removable: Removable,
}

impl FinalizerReport {
    /// A Namespace's own `kubernetes` finalizer (`spec.finalizers`).
    pub fn is_namespace_finalizer(&self) -> bool {
        self.field == FinalizerField::Spec && self.name == NAMESPACE_FINALIZER
    }

    /// Whether `unstick` leaves it in place: its owner looks alive and it
    /// was not named with `--finalizer` (`named`).
    pub fn held_back(&self, named: &[String]) -> bool {
        matches!(self.owner_alive, Liveness::Alive(_)) && !named.contains(&self.name)
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
            let type_name = type_name(&resource);
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
    pub async fn owner_alive(&mut self, found: &Found, owner: &Owner) -> Liveness {
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

/// Where a built-in controller runs, by the name of its leader lease.
fn runs_in(controller: &BuiltinController) -> &'static str {
    match controller.name {
        "customresourcedefinition-finalizer" => "kube-apiserver",
        "service" => "cloud-controller-manager",
        "kube-scheduler" => "kube-scheduler",
        _ => "kube-controller-manager",
    }
}

/// The admission target a removal of `field` from `found` is written to.
pub fn target_of(found: &Found, field: FinalizerField) -> Target<'_> {
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
pub fn owner(policy: &Policy, found: &Found, finalizer: &str, field: FinalizerField) -> Owner {
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

/// A removal as the webhook will see it: decided by the webhook's own core.
pub struct Proposed<'a> {
    pub found: &'a Found,
    pub field: FinalizerField,
    pub remove: &'a [String],
    pub identity: &'a SessionUser,
    /// The annotations the write will carry (`object`).
    pub annotations: &'a BTreeMap<String, String>,
}

impl Proposed<'_> {
    pub fn decide(&self, policy: &Policy) -> policy::Decision {
        let old_annotations = self
            .found
            .object
            .metadata
            .annotations
            .clone()
            .unwrap_or_default();
        let old: Vec<String> = match self.field {
            FinalizerField::Metadata => self.found.metadata_finalizers(),
            FinalizerField::Spec => self.found.spec_finalizers(),
        };
        let new: Vec<String> = old
            .iter()
            .filter(|f| !self.remove.contains(f))
            .cloned()
            .collect();
        let (old, new) = (policy::borrowed(&old), policy::borrowed(&new));
        let groups = policy::borrowed(&self.identity.groups);
        let lists = FinalizerLists {
            old: &old,
            new: &new,
        };
        let requester = Requester {
            username: &self.identity.username,
            groups: &groups,
        };
        let target = target_of(self.found, self.field);
        let change = Change {
            annotations: self.annotations,
            old_annotations: &old_annotations,
            deleting: self.found.object.metadata.deletion_timestamp.is_some(),
            now: Timestamp::now(),
            uid: self.found.object.metadata.uid.as_deref(),
            // Only the webhook holds the key: it verifies the seal.
            seal_key: None,
            ..Change::removing(target, requester, self.field, lists)
        };
        policy::decide(&change, policy)
    }
}

/// Whether you may remove `finalizer`, and how.
pub fn removable(
    policy: &Policy,
    found: &Found,
    finalizer: &str,
    field: FinalizerField,
    identity: &SessionUser,
) -> Removable {
    let current = found.annotations();
    let remove = [finalizer.to_string()];
    let proposed = |annotations: &BTreeMap<String, String>| {
        Proposed {
            found,
            field,
            remove: &remove,
            identity,
            annotations,
        }
        .decide(policy)
    };
    let settings = &policy.override_settings;
    let as_is = proposed(&current);
    if let Some(by) = as_is.removed.iter().find_map(|r| r.authorized_by.as_ref()) {
        return Removable::Authorized { by: by.to_string() };
    }
    if settings.require_deletion && found.object.metadata.deletion_timestamp.is_none() {
        return Removable::NotDeleting;
    }
    let accepts = settings.accepts(finalizer);
    if let Accepts::Never { .. } = accepts {
        return Removable::No {
            why: refused_reason(&accepts, ""),
        };
    }
    if let Some(approval_policy) = &settings.approval {
        return match as_is.outcome {
            // Everything but the seal holds; the webhook checks that.
            Outcome::Override(_)
            | Outcome::Denied {
                problem: OverrideProblem::Unverifiable,
                ..
            } => Removable::WithApproval {
                approved_by: current
                    .get(approval::APPROVED_BY)
                    .cloned()
                    .unwrap_or_default(),
                expires: current
                    .get(approval::OVERRIDE_EXPIRES)
                    .cloned()
                    .unwrap_or_default(),
            },
            Outcome::Denied { problem, .. } => Removable::NeedsApproval {
                why: approval_problem(&problem),
                approvers: approval_policy.describe_approvers(),
                reasons: accepts.reasons().to_vec(),
            },
            other => Removable::No {
                why: unexpected(&other),
            },
        };
    }
    // Would an override you write do it? Only with a reason that releases it.
    let Some(reason) = accepts.reasons().first() else {
        return Removable::No {
            why: refused_reason(&accepts, ""),
        };
    };
    let mut with_override = current.clone();
    with_override.insert(settings.annotation.clone(), format!("{reason}: check"));
    match proposed(&with_override).outcome {
        Outcome::Override(_) => Removable::WithOverride {
            annotation: settings.annotation.clone(),
            reasons: accepts.reasons().to_vec(),
        },
        Outcome::Denied { problem, .. } => Removable::No {
            why: problem.to_string(),
        },
        other => Removable::No {
            why: unexpected(&other),
        },
    }
}

/// Why an override with `reason` does not release a finalizer (`reason`
/// empty: why none does).
pub fn refused_reason(accepts: &Accepts<'_>, reason: &str) -> String {
    match accepts {
        Accepts::Never { entry } => {
            format!("no override releases it: only its rule or controller ({entry})")
        }
        Accepts::Only { reasons, entry } if reason.is_empty() => {
            format!(
                "only an override with {} releases it ({entry})",
                reasons.join(", ")
            )
        }
        Accepts::Only { reasons, entry } => format!(
            "it accepts only {} ({entry}): not attempted with --reason {reason}",
            reasons.join(", ")
        ),
        Accepts::Every(reasons) => format!("an override with {} releases it", reasons.join(", ")),
    }
}

/// A decision that neither authorizes the removal nor asks for an override
/// or an approval, said plainly.
fn unexpected(outcome: &Outcome) -> String {
    match outcome {
        Outcome::NotJudged => "the webhook would not judge this write".into(),
        Outcome::NothingRemoved => "the write would remove no finalizer".into(),
        Outcome::Authorized => "authorized".into(),
        Outcome::Override(o) => format!("allowed by the override ({})", o.reason),
        Outcome::ApprovalRecorded => "the write would record an approval".into(),
        Outcome::ApprovalRefused { problem, .. } => {
            format!("the approval would be refused: {problem}")
        }
        Outcome::Denied { problem, .. } => problem.to_string(),
        Outcome::TooManyNames { field, .. } => {
            format!("{} holds too many names to judge", field.path())
        }
    }
}

/// The two-person rule's problems, said plainly.
pub fn approval_problem(problem: &OverrideProblem) -> String {
    match problem {
        OverrideProblem::Absent | OverrideProblem::NotApprovedEarlier => format!(
            "no approval on the object ({} and {} are missing)",
            approval::APPROVED_BY,
            approval::OVERRIDE_EXPIRES
        ),
        OverrideProblem::Expired(at) => format!("the approval expired at {at}"),
        OverrideProblem::SelfApproved(who) => {
            format!("the approval is your own ({who}): another person must run unstick")
        }
        other => other.to_string(),
    }
}

/// Explains every finalizer of `found`, or only those in `only`.
pub async fn explain(
    probe: &mut Probe,
    policy: &Policy,
    found: &Found,
    only: &[String],
    identity: &SessionUser,
) -> Vec<FinalizerReport> {
    let mut out = Vec::new();
    let lists = [
        (FinalizerField::Metadata, found.metadata_finalizers()),
        (FinalizerField::Spec, found.spec_finalizers()),
    ];
    for (field, names) in lists {
        for name in names {
            if !only.is_empty() && !only.contains(&name) {
                continue;
            }
            if out
                .iter()
                .any(|r: &FinalizerReport| r.name == name && r.field == field)
            {
                continue;
            }
            let owner = owner(policy, found, &name, field);
            let owner_alive = probe.owner_alive(found, &owner).await;
            let removable = removable(policy, found, &name, field, identity);
            out.push(FinalizerReport {
                name,
                field,
                owner,
                owner_alive,
                removable,
            });
        }
    }
    out
}

/// What the object's finalizers were protecting.
pub fn may_leak(found: &Found) -> Ledger {
    let value = serde_json::to_value(&found.object).unwrap_or_default();
    ledger_of(&value)
}

/// `widgets.example.com`, `configmaps`: a type as `unstick` and kubectl take it.
fn type_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
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
pub async fn namespace_blockers(probe: &mut Probe, found: &Found) -> Vec<String> {
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
    use kube::api::ApiResource;
    use serde_json::json;

    use super::*;

    fn pod(deleting: bool, annotations: serde_json::Value) -> Found {
        let mut object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "resourceVersion": "7",
                "finalizers": ["example.com/cleanup"],
                "annotations": annotations,
            },
            "spec": {"nodeName": "worker-3"},
        });
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-21T07:00:00Z");
        }
        Found {
            resource: ApiResource::erase::<Pod>(&()),
            namespaced: true,
            object: serde_json::from_value(object).unwrap(),
        }
    }

    fn who(username: &str) -> SessionUser {
        SessionUser {
            username: username.into(),
            groups: vec!["system:authenticated".into()],
        }
    }

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    const RULES: &str = "rules:\n  - name: cleanup\n    finalizers: [example.com/*]\n    users: [alice]\n    serviceAccounts: [ops:cleaner]\n";
    const TWO_PERSON: &str = "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n";

    fn may(policy: &Policy, found: &Found, user: &str) -> Removable {
        removable(
            policy,
            found,
            "example.com/cleanup",
            FinalizerField::Metadata,
            &who(user),
        )
    }

    #[test]
    fn who_may_remove_it_and_how() {
        let rules = policy(RULES);
        let stuck = pod(true, json!({}));
        assert_eq!(
            may(&rules, &stuck, "alice"),
            Removable::Authorized {
                by: "rule cleanup".into()
            }
        );
        assert!(matches!(
            may(&rules, &stuck, "bob"),
            Removable::WithOverride { .. }
        ));
        assert_eq!(
            may(&rules, &pod(false, json!({})), "bob"),
            Removable::NotDeleting
        );
        // A rule needs no deletion.
        assert!(matches!(
            may(&rules, &pod(false, json!({})), "alice"),
            Removable::Authorized { .. }
        ));
    }

    #[test]
    fn the_reasons_that_release_each_finalizer_are_said() {
        let narrowed = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [node-lost]\n",
        )
        .unwrap();
        let r = may(&narrowed, &pod(true, json!({})), "oncall");
        assert_eq!(
            r.to_string(),
            "only with an override (finalizer-guard.io/override): --reason node-lost --detail TEXT"
        );
        let never = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [\"example.com/*\"]\n      never: true\n",
        )
        .unwrap();
        assert_eq!(
            may(&never, &pod(true, json!({})), "oncall").to_string(),
            "no: no override releases it: only its rule or controller (override.finalizers[0])"
        );
        let two_person = Policy::from_yaml(
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [controller-uninstalled]\n      approval: required\n",
        )
        .unwrap();
        let r = may(&two_person, &pod(true, json!({})), "oncall").to_string();
        assert!(
            r.ends_with("runs `finalizer-guard approve --reason controller-uninstalled`"),
            "{r}"
        );
    }

    #[test]
    fn the_two_person_rule_is_said_plainly() {
        let p = policy(TWO_PERSON);
        let in_an_hour = (Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
        let approval = |by: &str, expires: &str| {
            json!({
                "finalizer-guard.io/override": "node-lost: INC-1",
                "finalizer-guard.io/approved-by": by,
                "finalizer-guard.io/override-expires": expires,
            })
        };
        let needs = |r: Removable| match r {
            Removable::NeedsApproval { why, approvers, .. } => {
                assert_eq!(approvers, "users sec-lead");
                why
            }
            other => panic!("{other:?}"),
        };
        assert!(needs(may(&p, &pod(true, json!({})), "oncall")).contains("no approval"));
        assert!(
            needs(may(
                &p,
                &pod(true, approval("sec-lead", "2026-01-01T00:00:00Z")),
                "oncall"
            ))
            .contains("expired")
        );
        assert!(
            needs(may(
                &p,
                &pod(true, approval("sec-lead", &in_an_hour)),
                "sec-lead"
            ))
            .contains("your own")
        );
        assert_eq!(
            may(&p, &pod(true, approval("sec-lead", &in_an_hour)), "oncall"),
            Removable::WithApproval {
                approved_by: "sec-lead".into(),
                expires: in_an_hour.clone()
            }
        );
    }

    #[test]
    fn owners_by_table_then_rules() {
        let rules = policy(RULES);
        let found = pod(true, json!({}));
        match owner(
            &rules,
            &found,
            "example.com/cleanup",
            FinalizerField::Metadata,
        ) {
            Owner::Rules { rules } => {
                assert_eq!(rules[0].rule, "cleanup");
                assert_eq!(
                    rules[0].identities,
                    ["user:alice", "serviceaccount:ops:cleaner"]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            owner(
                &rules,
                &found,
                "batch.kubernetes.io/job-tracking",
                FinalizerField::Metadata
            ),
            Owner::Builtin {
                controller: "job",
                runs_in: "kube-controller-manager"
            }
        ));
        assert!(matches!(
            owner(&rules, &found, "other.io/x", FinalizerField::Metadata),
            Owner::Unknown
        ));
    }

    /// A rule names the finalizer for a controller in other namespaces:
    /// the owner line says to widen it, not "unknown".
    #[test]
    fn a_rule_that_names_the_finalizer_elsewhere_is_named() {
        let gitrepo = |ns: &str| {
            Found {
            resource: ApiResource {
                group: "source.toolkit.fluxcd.io".into(),
                version: "v1".into(),
                api_version: "source.toolkit.fluxcd.io/v1".into(),
                kind: "GitRepository".into(),
                plural: "gitrepositories".into(),
            },
            namespaced: true,
            object: serde_json::from_value(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": "podinfo", "namespace": ns, "finalizers": ["finalizers.fluxcd.io"]},
            }))
            .unwrap(),
        }
        };
        let flux = policy(
            "rules:\n  - name: flux-system-source-controller\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    namespaces: [\"team-a\", \"team-b\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n",
        );
        let here = owner(
            &flux,
            &gitrepo("team-c"),
            "finalizers.fluxcd.io",
            FinalizerField::Metadata,
        );
        assert_eq!(
            here.to_string(),
            "rule flux-system-source-controller lets ServiceAccount flux-system:source-controller remove it in team-a, team-b but not here: widen the rule (namespaces) rather than override"
        );
        let json = serde_json::to_value(&here).unwrap();
        assert_eq!(json["kind"], "elsewhere");
        assert_eq!(json["rules"][0]["namespaces"], json!(["team-a", "team-b"]));
        // Where it does cover: the rule.
        assert!(matches!(
            owner(
                &flux,
                &gitrepo("team-a"),
                "finalizers.fluxcd.io",
                FinalizerField::Metadata
            ),
            Owner::Rules { .. }
        ));
        // Another resource: the resources to widen.
        let pods = policy(
            "rules:\n  - name: pods-only\n    finalizers: [\"finalizers.fluxcd.io\"]\n    users: [ci-bot]\n    resources: [pods]\n",
        );
        assert_eq!(
            owner(
                &pods,
                &gitrepo("team-c"),
                "finalizers.fluxcd.io",
                FinalizerField::Metadata
            )
            .to_string(),
            "rule pods-only lets user ci-bot remove it on pods but not here: widen the rule (resources) rather than override"
        );
        // No rule names it anywhere: unknown, as before.
        assert_eq!(
            owner(
                &flux,
                &gitrepo("team-c"),
                "other.io/x",
                FinalizerField::Metadata
            ),
            Owner::Unknown
        );
    }

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
