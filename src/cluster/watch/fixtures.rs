//! What the watch's tests share: types, times and objects.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::discovery::ApiResource;

use super::tracker::WatchedType;

pub(super) fn kind_of(resource: ApiResource, namespaced: bool) -> Arc<WatchedType> {
    Arc::new(WatchedType::new(resource, namespaced))
}

pub(super) fn widgets() -> Arc<WatchedType> {
    let gvk = kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget");
    kind_of(ApiResource::from_gvk_with_plural(&gvk, "widgets"), true)
}

pub(super) fn widgets_v2() -> Arc<WatchedType> {
    let gvk = kube::core::GroupVersionKind::gvk("example.net", "v2", "Widget");
    kind_of(ApiResource::from_gvk_with_plural(&gvk, "widgets"), true)
}

pub(super) fn pods() -> Arc<WatchedType> {
    kind_of(ApiResource::erase::<Pod>(&()), true)
}

pub(super) fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

pub(super) fn meta(
    name: &str,
    uid: &str,
    deleting: Option<&str>,
    finalizers: &[&str],
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        uid: Some(uid.into()),
        deletion_timestamp: deleting.map(|t| Time(at(t))),
        finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
        ..ObjectMeta::default()
    }
}

pub(super) const T0: &str = "2026-11-21T07:00:00Z";
