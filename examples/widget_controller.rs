//! A third-party controller, as the end-to-end scenarios run one: it puts its
//! finalizer on every Widget (`widgets.e2e.example.com`) and, when a Widget
//! is deleted, does its cleanup and removes the finalizer, as a
//! controller-runtime `Reconcile` does. It is built on kube-rs's
//! `runtime::Controller` and `runtime::finalizer`, and runs with whatever
//! credentials its kubeconfig holds (the scenarios give it a ServiceAccount
//! token of its own).
//!
//! ```text
//! KUBECONFIG=widget.kubeconfig cargo run --example widget_controller
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// The controller's finalizer.
const FINALIZER: &str = "widgets.e2e.example.com/cleanup";

struct Context {
    client: Client,
    resource: ApiResource,
}

#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

async fn reconcile(widget: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Failed> {
    let namespace = widget.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.resource);
    let name = widget.name_any();
    let who = format!("{namespace}/{name}");
    finalizer(&api, FINALIZER, widget, |event| async move {
        match event {
            Event::Apply(_) => {
                eprintln!("widget {who}: finalizer in place");
                Ok::<_, std::convert::Infallible>(Action::await_change())
            }
            Event::Cleanup(_) => {
                eprintln!("widget {who}: cleaned up, removing {FINALIZER}");
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Failed(format!("widget {name}: {e}")))
}

fn error_policy(_: Arc<DynamicObject>, error: &Failed, _: Arc<Context>) -> Action {
    eprintln!("error: {error}");
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = match Client::try_default().await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: no cluster to talk to: {e}");
            std::process::exit(2);
        }
    };
    let gvk = GroupVersionKind::gvk("e2e.example.com", "v1", "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let context = Arc::new(Context {
        client,
        resource: resource.clone(),
    });
    eprintln!("widget-controller: watching widgets.e2e.example.com");
    Controller::new_with(widgets, watcher::Config::default(), resource)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                eprintln!("error: {e}");
            }
        })
        .await;
}
