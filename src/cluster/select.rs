//! Which objects a command works on: `TYPE/NAME`, `TYPE`, `--node`, `-n`/`-A`, `-l`.

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};

use super::{ClusterError, Session, read};

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
pub struct Found {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub object: DynamicObject,
}

impl Found {
    /// `pod/web-0`, `widget.example.com/w1`: as kubectl names objects.
    pub fn display_name(&self) -> String {
        let kind = self.resource.kind.to_lowercase();
        let name = self.object.metadata.name.as_deref().unwrap_or_default();
        if self.resource.group.is_empty() {
            format!("{kind}/{name}")
        } else {
            format!("{kind}.{}/{name}", self.resource.group)
        }
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

    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        match self.namespace() {
            Some(ns) if self.namespaced => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
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

    /// Being deleted, and held by finalizers: what `unstick` is for.
    pub fn is_stuck(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
            && !(self.metadata_finalizers().is_empty() && self.spec_finalizers().is_empty())
    }
}

/// `pod/web-0 -n team-a`, `namespace/legacy`: as a kubectl command names an object.
pub fn label(object: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{object} -n {ns}"),
        None => object.to_string(),
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

/// What a selection found: the objects, and the named ones that were not there.
#[derive(Debug, Default)]
pub struct Selected {
    pub objects: Vec<Found>,
    pub missing: Vec<Missing>,
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

impl Selection {
    /// Whether anything was selected at all.
    pub fn check(&self) -> Result<(), ClusterError> {
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
    ) -> Result<Result<Found, Missing>, ClusterError> {
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
        let api = object_api(&session.client, &resource, namespaced.then_some(ns));
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(Ok(Found {
                resource,
                namespaced,
                object,
            })),
            Ok(None) => Ok(Err(Missing {
                target: target.to_string(),
                why: if namespaced {
                    format!("not found in namespace {ns}")
                } else {
                    "not found".into()
                },
            })),
            Err(e) => Err(ClusterError::api(format!("reading {target}"), e)),
        }
    }
}

/// The API of one type, in one namespace or (`None`) all.
fn object_api(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
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
    /// `spec.finalizers` the metadata does not show) are read whole, for
    /// what explains them. The rest are counted as not stuck.
    async fn stuck(&self, params: &ListParams, selected: &mut Selected) -> kube::Result<()> {
        let api = object_api(
            self.client,
            &self.resource,
            self.namespace.filter(|_| self.namespaced),
        );
        let is_namespace = self.resource.group.is_empty() && self.resource.plural == "namespaces";
        let mut candidates = Vec::new();
        let api = &api;
        read::pages(
            params,
            |p| async move { api.list_metadata(&p).await },
            |item| {
                let meta = item.metadata;
                let held = meta.finalizers.as_ref().is_some_and(|f| !f.is_empty()) || is_namespace;
                if meta.deletion_timestamp.is_some() && held {
                    candidates.push((meta.namespace, meta.name.unwrap_or_default()));
                } else {
                    selected.not_stuck += 1;
                }
            },
        )
        .await?;
        for (namespace, name) in candidates {
            let namespace = namespace.as_deref().filter(|_| self.namespaced);
            // Gone since it was listed: nothing holds it any more.
            if let Some(object) = object_api(self.client, &self.resource, namespace)
                .get_opt(&name)
                .await?
            {
                push_listed(selected, self.resource.clone(), self.namespaced, object);
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
    let found = Found {
        resource,
        namespaced,
        object,
    };
    if found.is_stuck() {
        selected.objects.push(found);
    } else {
        selected.not_stuck += 1;
    }
}
