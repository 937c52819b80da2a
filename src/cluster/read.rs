//! Reading the cluster the same way everywhere: one pager for every list,
//! and the aggregated APIs' health from the typed `APIService`.

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Client;
use kube::api::{Api, ListParams, ObjectList};
use kube::discovery::ApiResource;

/// `pods`, `widgets.example.com`: a type as RBAC, the policy's `resources`,
/// kubectl and `unstick` name it (the plural, then the group unless it is
/// the core group).
pub fn type_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// Objects read per list request.
pub const PAGE: u32 = 500;

/// Lists every page, [`PAGE`] objects at a time, following the API
/// server's continue token, and hands each item to `each` as its page
/// arrives: nothing is held but what `each` keeps. `list` is the request,
/// `Api::list_metadata` where the metadata is enough (it almost always is),
/// `Api::list` where a field of the object is needed.
pub async fn pages<T: Clone, Fut>(
    params: &ListParams,
    mut list: impl FnMut(ListParams) -> Fut,
    mut each: impl FnMut(T),
) -> kube::Result<()>
where
    Fut: Future<Output = kube::Result<ObjectList<T>>>,
{
    let mut params = params.clone().limit(PAGE);
    loop {
        let page = list(params.clone()).await?;
        page.items.into_iter().for_each(&mut each);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// An aggregated API that is not Available: its group cannot be read, and a
/// namespace holding its objects cannot be emptied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServiceDown {
    /// `v1beta1.metrics.k8s.io`
    pub name: String,
    /// `metrics.k8s.io/v1beta1`
    pub group_version: String,
    /// The Available condition's reason and message.
    pub reason: String,
    pub message: String,
}

impl ApiServiceDown {
    fn of(service: &APIService) -> Option<ApiServiceDown> {
        let available = service
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Available")?;
        if available.status == "True" {
            return None;
        }
        let spec = service.spec.as_ref();
        let field = |f: Option<&String>, none: &str| f.map_or(none.to_string(), String::clone);
        Some(ApiServiceDown {
            name: service.metadata.name.clone().unwrap_or_default(),
            group_version: format!(
                "{}/{}",
                field(spec.and_then(|s| s.group.as_ref()), ""),
                field(spec.and_then(|s| s.version.as_ref()), "")
            ),
            reason: field(available.reason.as_ref(), "no reason"),
            message: field(available.message.as_ref(), "no message"),
        })
    }
}

impl std::fmt::Display for ApiServiceDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not Available ({}: {})", self.reason, self.message)
    }
}

/// The APIServices that are not Available.
pub async fn unavailable_apiservices(client: &Client) -> kube::Result<Vec<ApiServiceDown>> {
    let api: &Api<APIService> = &Api::all(client.clone());
    let mut down = Vec::new();
    pages(
        &ListParams::default(),
        |p| async move { api.list(&p).await },
        |s| down.extend(ApiServiceDown::of(&s)),
    )
    .await?;
    Ok(down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(available: Option<(&str, Option<&str>)>) -> APIService {
        let conditions = available.map(|(status, reason)| {
            json!([{"type": "Available", "status": status, "reason": reason, "message": "no endpoints"}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_apiservice_said_not_available_is_down() {
        let down = ApiServiceDown::of(&service(Some(("False", Some("MissingEndpoints"))))).unwrap();
        assert_eq!(down.group_version, "metrics.k8s.io/v1beta1");
        assert_eq!(down.name, "v1beta1.metrics.k8s.io");
        assert_eq!(
            down.to_string(),
            "not Available (MissingEndpoints: no endpoints)"
        );
        let unknown = ApiServiceDown::of(&service(Some(("Unknown", None)))).unwrap();
        assert_eq!(unknown.reason, "no reason");
        assert_eq!(ApiServiceDown::of(&service(Some(("True", None)))), None);
        // No condition yet: nothing says it is down.
        assert_eq!(ApiServiceDown::of(&service(None)), None);
    }
}
