//! An AdmissionReview's request bound as kube-apiserver binds it for CEL
//! (a webhook's matchConditions, a ValidatingAdmissionPolicy), and the case
//! files those are evaluated on: tests/match_conditions.rs and tests/vap.rs.

use std::path::{Path, PathBuf};

use cel::Context;
use serde_json::{Value, json};

/// `object`, `oldObject` (null when the review has none) and `request`.
pub fn bind_request(context: &mut Context<'_, '_>, request: &Value) {
    for (name, key) in [("object", "object"), ("oldObject", "oldObject")] {
        context
            .add_variable(name, request.get(key).cloned().unwrap_or(Value::Null))
            .unwrap();
    }
    context
        .add_variable("request", request_variable(request))
        .unwrap();
}

/// The string at `pointer`, empty where the review leaves it out (as a
/// typed field is).
fn string_at(request: &Value, pointer: &str) -> Value {
    json!(
        request
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    )
}

/// `request` as kube-apiserver binds it: a typed AdmissionRequest, so every
/// field is there, empty when the review leaves it out.
pub fn request_variable(request: &Value) -> Value {
    let s = |pointer: &str| string_at(request, pointer);
    let gvk = |key: &str| {
        json!({
            "group": s(&format!("/{key}/group")),
            "version": s(&format!("/{key}/version")),
            "kind": s(&format!("/{key}/kind")),
        })
    };
    let gvr = |key: &str| {
        json!({
            "group": s(&format!("/{key}/group")),
            "version": s(&format!("/{key}/version")),
            "resource": s(&format!("/{key}/resource")),
        })
    };
    json!({
        "uid": s("/uid"),
        "kind": gvk("kind"),
        "resource": gvr("resource"),
        "subResource": s("/subResource"),
        "requestKind": gvk("requestKind"),
        "requestResource": gvr("requestResource"),
        "requestSubResource": s("/requestSubResource"),
        "name": s("/name"),
        "namespace": s("/namespace"),
        "operation": s("/operation"),
        "userInfo": user_info(request),
        "dryRun": request.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
        "options": request.get("options").cloned().unwrap_or(Value::Null),
    })
}

/// `request.userInfo` as kube-apiserver hands it to CEL: converted from
/// the typed request, whose `groups` and `extra` are `omitempty`, so a user
/// with no groups has no `groups` key (an expression must guard it with has()).
fn user_info(request: &Value) -> Value {
    let s = |pointer: &str| string_at(request, pointer);
    let mut info = json!({"username": s("/userInfo/username"), "uid": s("/userInfo/uid")});
    for key in ["groups", "extra"] {
        if let Some(v) = request.pointer(&format!("/userInfo/{key}")).filter(|v| {
            v.as_array().is_some_and(|a| !a.is_empty())
                || v.as_object().is_some_and(|o| !o.is_empty())
        }) {
            info[key] = v.clone();
        }
    }
    info
}

/// Every file under `dir` ending in `.json`, sorted. A `dir` that cannot be
/// read fails the test: a missing folder of cases is no case passed.
#[track_caller]
pub fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(json_files(&path));
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The AdmissionReview in a file: the file itself, or the `review` (or a
/// `raw` body that is JSON) of an apiserver-sim case file.
pub fn review_in(value: &Value) -> Option<Value> {
    if value.get("kind").and_then(Value::as_str) == Some("AdmissionReview") {
        return Some(value.clone());
    }
    if let Some(review) = value.get("review") {
        return Some(review.clone());
    }
    value
        .get("raw")
        .and_then(Value::as_str)
        .and_then(|raw| serde_json::from_str(raw).ok())
}
