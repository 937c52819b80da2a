//! Which objects a command works on: `TYPE/NAME`, `TYPE`, `--node`, `-n`/`-A`, `-l`.

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};

use super::object::{ObjectApi, ReadError, invalid_name};
use super::read;
use super::session::{ClusterError, Session};
use crate::output::escape;

/// Which objects: kubectl's habits.
#[derive(Debug, Clone, Default, Args)]
pub struct Selection {
    /// Objects as TYPE/NAME (pod/web-0, namespace/team-a, widgets.example.com/w1),
    /// or a TYPE alone for every stuck object of that type.
    #[arg(value_name = "TYPE/NAME")]
    pub targets: Vec<String>,
    /// Every pod bound to this node, in all namespaces (or in -n NS).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// The namespace. Default: the kubeconfig context's.
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// In every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only objects with these labels (a label selector, as kubectl -l takes).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// One object found, with the type it was read as.
#[derive(Debug, Clone)]
pub struct FoundObject {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub object: DynamicObject,
}

impl FoundObject {
    /// `pod/web-0`, `widget.example.com/w1`: as kubectl names objects.
    pub fn display_name(&self) -> String {
        display_name(&self.resource, self.name())
    }

    pub fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }

    /// `pod/web-0 -n team-a`: as a kubectl command names it.
    pub fn label(&self) -> String {
        label(
            &self.display_name(),
            self.namespace().filter(|_| self.namespaced),
        )
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object.metadata.namespace.as_deref()
    }

    pub fn is_namespace(&self) -> bool {
        self.resource.group.is_empty() && self.resource.plural == "namespaces"
    }

    /// Its API, addressing it by its exact name.
    pub fn api(&self, client: &Client) -> ObjectApi {
        let namespace = self.namespace().filter(|_| self.namespaced);
        ObjectApi::new(client, &self.resource, namespace)
    }

    /// `spec.finalizers`: a Namespace's, written through `namespaces/finalize`.
    pub fn spec_finalizers(&self) -> Vec<String> {
        if !self.is_namespace() {
            return Vec::new();
        }
        string_list(&self.object.data["spec"]["finalizers"])
    }

    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.object.metadata.annotations.clone().unwrap_or_default()
    }

    pub fn metadata_finalizers(&self) -> Vec<String> {
        self.object.metadata.finalizers.clone().unwrap_or_default()
    }

    /// The node a pod is bound to.
    pub fn node(&self) -> Option<&str> {
        if !self.is_pod() {
            return None;
        }
        self.object.data["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
    }

    pub fn is_pod(&self) -> bool {
        self.resource.group.is_empty() && self.resource.plural == "pods"
    }

    /// A pod being deleted that no finalizer holds, bound to a node: it
    /// waits for its kubelet to confirm the deletion, which a dead node's
    /// never will. Stuck when the node is dead.
    pub fn awaits_kubelet(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
            && self.metadata_finalizers().is_empty()
            && self.node().is_some()
    }

    /// Being deleted, and held by finalizers: what `unstick` is for.
    pub fn is_stuck(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
            && !(self.metadata_finalizers().is_empty() && self.spec_finalizers().is_empty())
    }
}

/// `finalizer-guard VERB OBJECT [-n NS] ARGS...` for a person to paste:
/// each word shell-quoted ([`crate::output::shell_command`]), so that no
/// name runs anything and each names exactly its object.
pub fn command(verb: &str, object: &str, namespace: Option<&str>, args: &[&str]) -> String {
    let mut words = vec!["finalizer-guard", verb, object];
    if let Some(ns) = namespace {
        words.extend(["-n", ns]);
    }
    words.extend(args);
    crate::output::shell_command(words)
}

/// `pod/web-0`, `widget.example.com/w1`: as kubectl names objects, as they are.
fn display_name(resource: &ApiResource, name: &str) -> String {
    let kind = resource.kind.to_lowercase();
    if resource.group.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}.{}/{name}", resource.group)
    }
}

/// `pod/web-0 -n team-a`, `namespace/legacy`: as a kubectl command names
/// an object, for a person to read: escaped ([`escape`]), so that a name's
/// control characters never act on the terminal. Not for pasting: a
/// command to paste is built by [`crate::output::shell_command`].
pub fn label(object: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{} -n {}", escape(object), escape(ns)),
        None => escape(object).into_owned(),
    }
}

fn string_list(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A name that did not lead to an object.
#[derive(Debug, Clone)]
pub struct Missing {
    pub target: String,
    pub why: String,
}

/// What a selection found: the objects, the named ones that were not
/// there, and those that could not be read as the object named or listed.
#[derive(Debug, Default)]
pub struct Selected {
    pub objects: Vec<FoundObject>,
    pub missing: Vec<Missing>,
    /// Each left alone, with why: the rest go on.
    pub unread: Vec<Missing>,
    /// Objects listed (by TYPE or --node) that are not stuck, left alone.
    pub not_stuck: usize,
}

/// kubectl's short names for the built-in types.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("po", "pods"),
    ("ns", "namespaces"),
    ("svc", "services"),
    ("cm", "configmaps"),
    ("pv", "persistentvolumes"),
    ("pvc", "persistentvolumeclaims"),
    ("no", "nodes"),
    ("sa", "serviceaccounts"),
    ("ep", "endpoints"),
    ("deploy", "deployments"),
    ("rs", "replicasets"),
    ("sts", "statefulsets"),
    ("ds", "daemonsets"),
    ("cj", "cronjobs"),
    ("ing", "ingresses"),
    ("crd", "customresourcedefinitions"),
    ("crds", "customresourcedefinitions"),
    ("sc", "storageclasses"),
    ("pdb", "poddisruptionbudgets"),
    ("hpa", "horizontalpodautoscalers"),
    ("netpol", "networkpolicies"),
    ("ev", "events"),
    ("rc", "replicationcontrollers"),
    ("limits", "limitranges"),
    ("quota", "resourcequotas"),
];

/// Resolves `TYPE` as kubectl does: plural, singular or short name,
/// optionally qualified by group (`widgets.example.com`).
pub struct Resolver {
    discovery: Discovery,
}

impl Resolver {
    pub async fn new(client: &Client) -> Result<Resolver, ClusterError> {
        let discovery = match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(_) => Discovery::new(client.clone())
                .run()
                .await
                .map_err(|e| ClusterError::api("discovering the API server's types", e))?,
        };
        Ok(Resolver { discovery })
    }

    /// Every type served, at its group's preferred version.
    pub fn served(&self) -> Vec<(ApiResource, ApiCapabilities)> {
        self.discovery
            .groups()
            .flat_map(|g| g.recommended_resources())
            .collect()
    }

    pub fn resolve(&self, name: &str) -> Result<(ApiResource, ApiCapabilities), ClusterError> {
        let lower = name.to_lowercase();
        let (base, group) = match lower.split_once('.') {
            Some((b, g)) => (b.to_string(), Some(g.to_string())),
            None => (lower.clone(), None),
        };
        let base = match (&group, SHORT_NAMES.iter().find(|(s, _)| *s == base)) {
            (None, Some((_, plural))) => plural.to_string(),
            _ => base,
        };
        let mut matches = Vec::new();
        for g in self.discovery.groups() {
            if group.as_deref().is_some_and(|want| want != g.name()) {
                continue;
            }
            for (ar, caps) in g.recommended_resources() {
                if ar.plural == base || ar.kind.to_lowercase() == base {
                    matches.push((ar, caps));
                }
            }
        }
        // As kubectl: the core group wins (events, not events.k8s.io).
        matches.sort_by_key(|(ar, _)| !ar.group.is_empty());
        matches.into_iter().next().ok_or_else(|| {
            ClusterError::Usage(format!(
                "the server doesn't have a resource type {} (kubectl api-resources lists them)",
                crate::output::quoted(name)
            ))
        })
    }
}

/// Whether `ns` can name a namespace: a DNS-1123 label (at most 63
/// characters of `a-z`, `0-9` and `-`, a letter or digit at each end), as
/// kube-apiserver requires. Anything else (`..`, `a/b`, an empty string)
/// would only reach the API server as a path it was never meant to be.
pub fn check_namespace(ns: &str) -> Result<(), ClusterError> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label = !ns.is_empty()
        && ns.len() <= 63
        && ns.chars().all(|c| alnum(c) || c == '-')
        && ns.starts_with(alnum)
        && ns.ends_with(alnum);
    if label {
        return Ok(());
    }
    Err(ClusterError::Usage(format!(
        "-n {}: not a namespace name (a DNS-1123 label: at most 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit)",
        crate::output::quoted(ns)
    )))
}

impl Selection {
    /// Whether anything was selected at all, and a namespace named as one can be.
    pub fn check(&self) -> Result<(), ClusterError> {
        if let Some(ns) = &self.namespace {
            check_namespace(ns)?;
        }
        if self.targets.is_empty() && self.node.is_none() {
            return Err(ClusterError::Usage(
                "name objects as TYPE/NAME (or a TYPE for all its stuck objects), or select pods with --node NODE".into(),
            ));
        }
        if self.node.is_some() && !self.targets.is_empty() {
            return Err(ClusterError::Usage(
                "--node selects pods: give it without TYPE/NAME".into(),
            ));
        }
        Ok(())
    }

    /// The namespace to list in: `None` for all.
    fn list_namespace<'a>(&'a self, session: &'a Session, all_by_default: bool) -> Option<&'a str> {
        if self.all_namespaces {
            None
        } else if let Some(ns) = &self.namespace {
            Some(ns)
        } else if all_by_default {
            None
        } else {
            Some(&session.namespace)
        }
    }

    /// Reads the selected objects. Named objects are returned whether stuck
    /// or not (the command says why it leaves one alone); listed ones only when stuck.
    pub async fn run(&self, session: &Session) -> Result<Selected, ClusterError> {
        self.check()?;
        let mut selected = Selected::default();
        let mut params = ListParams::default();
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        if let Some(node) = &self.node {
            let pods = Listing {
                client: &session.client,
                resource: ApiResource::erase::<Pod>(&()),
                namespaced: true,
                namespace: self.list_namespace(session, true),
            };
            let params = params.fields(&format!("spec.nodeName={node}"));
            pods.stuck(&params, &mut selected)
                .await
                .map_err(|e| ClusterError::api(format!("listing the pods on node {node}"), e))?;
            return Ok(selected);
        }
        let resolver = Resolver::new(&session.client).await?;
        for target in &self.targets {
            let (type_name, name) = match target.split_once('/') {
                Some((t, n)) if !n.is_empty() && !n.contains('/') => (t, Some(n)),
                Some(_) => {
                    return Err(ClusterError::Usage(format!(
                        "{}: write TYPE/NAME, e.g. pod/web-0",
                        crate::output::quoted(target)
                    )));
                }
                None => (target.as_str(), None),
            };
            let (resource, caps) = resolver.resolve(type_name)?;
            let namespaced = caps.scope == Scope::Namespaced;
            match name {
                Some(name) => {
                    let found = self.named(session, target, resource, namespaced, name);
                    match found.await? {
                        Ok(found) => selected.objects.push(found),
                        Err(missing) => selected.missing.push(missing),
                    }
                }
                None => {
                    let listing = Listing {
                        client: &session.client,
                        resource,
                        namespaced,
                        namespace: self.list_namespace(session, false),
                    };
                    listing
                        .stuck(&params, &mut selected)
                        .await
                        .map_err(|e| ClusterError::api(format!("listing {type_name}"), e))?;
                }
            }
        }
        Ok(selected)
    }

    /// `TYPE/NAME`: the object, or why there is none.
    async fn named(
        &self,
        session: &Session,
        target: &str,
        resource: ApiResource,
        namespaced: bool,
        name: &str,
    ) -> Result<Result<FoundObject, Missing>, ClusterError> {
        if self.selector.is_some() {
            return Err(ClusterError::Usage(
                "-l selects among listed objects: give a TYPE, not TYPE/NAME".into(),
            ));
        }
        if namespaced && self.all_namespaces {
            return Err(ClusterError::Usage(format!(
                "{target}: a named object needs one namespace (-n), not -A"
            )));
        }
        let ns = self.namespace.as_deref().unwrap_or(&session.namespace);
        let missing = |why: String| {
            Ok(Err(Missing {
                target: target.to_string(),
                why,
            }))
        };
        if let Some(why) = invalid_name(name) {
            return missing(format!("not a name the API server can hold: {why}"));
        }
        let api = ObjectApi::new(&session.client, &resource, namespaced.then_some(ns));
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(Ok(FoundObject {
                resource,
                namespaced,
                object,
            })),
            Ok(None) if namespaced => missing(format!("not found in namespace {}", escape(ns))),
            Ok(None) => missing("not found".into()),
            Err(e @ ReadError::NotTheOneNamed { .. }) => missing(e.to_string()),
            Err(ReadError::Api(e)) => {
                Err(ClusterError::api(format!("reading {}", escape(target)), e))
            }
        }
    }
}

/// One type listed, in a namespace or (`None`) all.
struct Listing<'a> {
    client: &'a Client,
    resource: ApiResource,
    namespaced: bool,
    namespace: Option<&'a str>,
}

impl Listing<'_> {
    /// Lists the type's metadata a page at a time; only the objects that
    /// may be stuck (being deleted, with finalizers, or a Namespace, whose
    /// `spec.finalizers` the metadata does not show, or a pod, which waits
    /// for its node's kubelet) are read whole, for what explains them. The
    /// rest are counted as not stuck.
    async fn stuck(&self, params: &ListParams, selected: &mut Selected) -> kube::Result<()> {
        let api = ObjectApi::new(
            self.client,
            &self.resource,
            self.namespace.filter(|_| self.namespaced),
        );
        let core = self.resource.group.is_empty();
        let is_namespace = core && self.resource.plural == "namespaces";
        let is_pod = core && self.resource.plural == "pods";
        let mut candidates: Vec<(Option<String>, String, Option<String>)> = Vec::new();
        let api = &api;
        read::pages(
            params,
            |p| async move { api.list_metadata(&p).await },
            |item| {
                let meta = item.metadata;
                let held = meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
                    || is_namespace
                    || is_pod;
                if meta.deletion_timestamp.is_some() && held {
                    candidates.push((meta.namespace, meta.name.unwrap_or_default(), meta.uid));
                } else {
                    selected.not_stuck += 1;
                }
            },
        )
        .await?;
        for (namespace, name, uid) in candidates {
            let namespace = namespace.as_deref().filter(|_| self.namespaced);
            let read = ObjectApi::new(self.client, &self.resource, namespace)
                .get_opt(&name)
                .await;
            // One object that cannot be read, or reads as another, is that
            // object's error line: the rest of the listing goes on.
            let unread = |why: String| {
                let object = display_name(&self.resource, &name);
                Missing {
                    target: match namespace {
                        Some(ns) => format!("{object} -n {ns}"),
                        None => object,
                    },
                    why,
                }
            };
            match read {
                // Gone since it was listed: nothing holds it any more.
                Ok(None) => {}
                Ok(Some(object)) if uid.is_some() && object.metadata.uid != uid => {
                    selected.unread.push(unread(format!(
                        "replaced since it was listed (uid {}, now {}): left alone",
                        uid.unwrap_or_default(),
                        object.metadata.uid.unwrap_or_default()
                    )));
                }
                Ok(Some(object)) => {
                    push_listed(selected, self.resource.clone(), self.namespaced, object)
                }
                Err(e) => selected.unread.push(unread(format!("cannot be read: {e}"))),
            }
        }
        Ok(())
    }
}

fn push_listed(
    selected: &mut Selected,
    resource: ApiResource,
    namespaced: bool,
    object: DynamicObject,
) {
    let found = FoundObject {
        resource,
        namespaced,
        object,
    };
    if found.is_stuck() || found.awaits_kubelet() {
        selected.objects.push(found);
    } else {
        selected.not_stuck += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-n` is refused before any request unless it is a DNS-1123 label.
    #[test]
    fn a_namespace_that_cannot_be_one_is_refused_before_any_request() {
        for ns in ["team-a", "a", "0", "kube-system", &"a".repeat(63)] {
            assert!(check_namespace(ns).is_ok(), "{ns}");
        }
        for ns in [
            "..",
            ".",
            "",
            "a/b",
            "Team-A",
            "-a",
            "a-",
            "a.b",
            "a\n",
            "a\u{1b}[2J",
            &"a".repeat(64),
        ] {
            let e = check_namespace(ns).unwrap_err();
            assert!(matches!(e, ClusterError::Usage(_)), "{ns}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        let selection = Selection {
            targets: vec!["pod/web-0".into()],
            namespace: Some("..".into()),
            ..Selection::default()
        };
        let e = selection.check().unwrap_err().to_string();
        assert!(e.contains("-n \"..\": not a namespace name"), "{e}");
    }
}
