//! Objects addressed by name, exactly: the one way these commands read and
//! write a named object.
//!
//! kube-rs puts a name into the request path as it is. Kubernetes validates
//! many names only as path segments (a Role, a ClusterRole, a RoleBinding
//! may be named `victim#decoy`, `a?b` or hold a newline), and an unencoded
//! `#` or `?` ends the path: `roles/victim#decoy` reaches `roles/victim`.
//! Here each name (and namespace) is percent-encoded as one path segment,
//! which kube-apiserver decodes, and each object read is checked to be the
//! one asked for (name and namespace) before anything is written to it.

use std::borrow::Cow;

use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, Patch,
    PatchParams, PostParams,
};
use kube::core::ObjectList;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::output::{chain, quoted};

/// Every byte but RFC 3986's unreserved characters is encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `name` as one URL path segment: every byte outside RFC 3986's unreserved
/// characters percent-encoded, so that nothing in it (`#`, `?`, `/`, a
/// control character) ends the segment or the path.
pub fn segment(name: &str) -> Cow<'_, str> {
    utf8_percent_encode(name, SEGMENT).into()
}

/// Why `name` cannot name a stored object, as kube-apiserver's path segment
/// validation says (`.`, `..`, or holding `/` or `%`, or empty): `None` when it can.
pub fn invalid_name(name: &str) -> Option<&'static str> {
    match name {
        "" => Some("a name may not be empty"),
        "." | ".." => Some("a name may not be '.' or '..'"),
        _ if name.contains('/') => Some("a name may not contain '/'"),
        _ if name.contains('%') => Some("a name may not contain '%'"),
        _ => None,
    }
}

/// Why an object could not be read as the one named.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}", chain(.0))]
    Api(#[source] kube::Error),
    /// The API server answered with another object than the one asked for:
    /// nothing is done with it.
    #[error(
        "the API server answered with another object ({got}) than the one asked for ({asked}): refused, nothing written"
    )]
    NotTheOneNamed { asked: String, got: String },
}

/// One type's API, in one namespace or across all, that reads and writes
/// objects by their exact names.
#[derive(Clone)]
pub struct ObjectApi {
    api: Api<DynamicObject>,
    /// The namespace asked for, as typed (`None`: cluster-wide, or all).
    namespace: Option<String>,
}

impl ObjectApi {
    pub fn new(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> ObjectApi {
        let api = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), &segment(ns), resource),
            None => Api::all_with(client.clone(), resource),
        };
        ObjectApi {
            api,
            namespace: namespace.map(String::from),
        }
    }

    /// The object named `name`, checked to be it (its name, and namespace
    /// when one was asked for); `None` when there is none.
    pub async fn get_opt(&self, name: &str) -> Result<Option<DynamicObject>, ReadError> {
        if invalid_name(name).is_some() {
            return Ok(None);
        }
        let object = self
            .api
            .get_opt(&segment(name))
            .await
            .map_err(ReadError::Api)?;
        object.map(|o| self.check(name, o)).transpose()
    }

    /// The metadata of the object named `name`, checked as [`Self::get_opt`] checks.
    pub async fn get_metadata_opt(
        &self,
        name: &str,
    ) -> Result<Option<PartialObjectMeta<DynamicObject>>, ReadError> {
        if invalid_name(name).is_some() {
            return Ok(None);
        }
        let object = self
            .api
            .get_metadata_opt(&segment(name))
            .await
            .map_err(ReadError::Api)?;
        let Some(object) = object else {
            return Ok(None);
        };
        self.same(
            name,
            object.metadata.name.as_deref(),
            object.metadata.namespace.as_deref(),
        )?;
        Ok(Some(object))
    }

    pub async fn list_metadata(
        &self,
        params: &ListParams,
    ) -> kube::Result<ObjectList<PartialObjectMeta<DynamicObject>>> {
        self.api.list_metadata(params).await
    }

    pub async fn patch(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<()>,
    ) -> kube::Result<DynamicObject> {
        self.api.patch(&segment(name), params, patch).await
    }

    pub async fn replace_subresource(
        &self,
        subresource: &str,
        name: &str,
        params: &PostParams,
        body: &DynamicObject,
    ) -> kube::Result<DynamicObject> {
        self.api
            .replace_subresource(subresource, &segment(name), params, body)
            .await
    }

    pub async fn delete(&self, name: &str, params: &DeleteParams) -> kube::Result<()> {
        self.api.delete(&segment(name), params).await.map(|_| ())
    }

    fn check(&self, name: &str, object: DynamicObject) -> Result<DynamicObject, ReadError> {
        let meta = &object.metadata;
        self.same(name, meta.name.as_deref(), meta.namespace.as_deref())?;
        Ok(object)
    }

    /// Whether what was read is what was asked for: the same name, and in
    /// the namespace asked for (when one was).
    fn same(
        &self,
        name: &str,
        got: Option<&str>,
        got_namespace: Option<&str>,
    ) -> Result<(), ReadError> {
        let namespace_ok = match &self.namespace {
            Some(ns) => got_namespace == Some(ns.as_str()),
            None => true,
        };
        if got == Some(name) && namespace_ok {
            return Ok(());
        }
        let at = |name: &str, ns: Option<&str>| match ns {
            Some(ns) => format!("{} in namespace {}", quoted(name), quoted(ns)),
            None => quoted(name),
        };
        Err(ReadError::NotTheOneNamed {
            asked: at(name, self.namespace.as_deref()),
            got: at(got.unwrap_or_default(), got_namespace),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_path_segment_whatever_it_holds() {
        assert_eq!(segment("web-0"), "web-0");
        assert_eq!(segment("a.b_c~d"), "a.b_c~d");
        assert_eq!(segment("victim#decoy"), "victim%23decoy");
        assert_eq!(segment("victim?x=1"), "victim%3Fx%3D1");
        assert_eq!(segment("a/b"), "a%2Fb");
        assert_eq!(segment("a\nb\u{1b}[2J"), "a%0Ab%1B%5B2J");
        assert_eq!(segment("x;touch${IFS}"), "x%3Btouch%24%7BIFS%7D");
        assert_eq!(segment("r\u{e9}"), "r%C3%A9");
        assert_eq!(segment("a b%"), "a%20b%25");
        // Every encoded name is a valid path of its own: http parses it
        // whole, with nothing left in a query or a fragment.
        for name in ["victim#decoy", "a?b", "a\nb", "\u{7f}\u{0}", "x y", "é/"] {
            let uri: http::Uri = format!("/apis/g/v1/namespaces/ns/roles/{}", segment(name))
                .parse()
                .unwrap();
            assert_eq!(uri.query(), None, "{name:?}");
            let last = uri.path().rsplit('/').next().unwrap();
            let decoded = percent_encoding::percent_decode_str(last)
                .decode_utf8()
                .unwrap();
            assert_eq!(decoded, name, "{name:?}");
        }
    }

    #[test]
    fn names_kube_apiserver_cannot_store_are_told() {
        assert_eq!(invalid_name("victim#decoy"), None);
        assert_eq!(invalid_name("a\nb"), None);
        for name in ["", ".", "..", "a/b", "a%23b"] {
            assert!(invalid_name(name).is_some(), "{name:?}");
        }
    }

    fn api(namespace: Option<&str>) -> ObjectApi {
        // Never called: the checks are pure.
        let client = Client::new(
            tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                    "no cluster",
                ))
            }),
            "default",
        );
        let resource = ApiResource {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "Role".into(),
            plural: "roles".into(),
        };
        ObjectApi::new(&client, &resource, namespace)
    }

    fn role(name: &str, namespace: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn an_object_read_is_the_one_named_or_is_refused() {
        let api = api(Some("team-a"));
        assert!(api.check("victim", role("victim", "team-a")).is_ok());
        let refused = api
            .check("victim#decoy", role("victim", "team-a"))
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the API server answered with another object (\"victim\" in namespace \"team-a\") than the one asked for (\"victim#decoy\" in namespace \"team-a\"): refused, nothing written"
        );
        assert!(api.check("victim", role("victim", "team-b")).is_err());
        // Across all namespaces, the name alone is asked for.
        assert!(api_all().check("victim", role("victim", "x")).is_ok());
        // A name no object can hold is not asked for at all.
        assert!(matches!(api.get_opt("a%23b").await, Ok(None)));
        assert!(matches!(api.get_opt("..").await, Ok(None)));
    }

    fn api_all() -> ObjectApi {
        api(None)
    }
}
