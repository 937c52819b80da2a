//! One reading of a body, wherever it is read: on random AdmissionReviews
//! with fields of every shape (missing, `null`, not a list, not a string,
//! sent twice, nested deep), the review's own parse (`admission::parse`),
//! the owned request a recording keeps (`admission::parse_owned`) and the
//! answer of `admission::review` read the same finalizers, `spec.finalizers`,
//! annotations and uids, refuse the same bodies with the same reason (one
//! that names the field), and agree with a model of the rules written out
//! here, sharing no code with `src/admission/`. (The review alone refuses
//! an annotation it decides by sent twice.)
//!
//! 1024 cases by default; `PROPTEST_CASES=100000 cargo test --test parse`
//! for a longer run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use finalizer_guard::admission::{self, LeanObject, Object, ReviewError};
use finalizer_guard::policy::Policy;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

const OVERRIDE: &str = "finalizer-guard.io/override";
const NAMES: &[&str] = &[
    "example.com/a",
    "example.com/b",
    "kubernetes",
    "widgets.example.com/cleanup",
    "é/ü",
    "quote\"and\\back",
];
const KEYS: &[&str] = &[OVERRIDE, "a", "b/c"];
const TIMESTAMP: &str = "2026-11-21T07:00:00Z";

// --- What is written --------------------------------------------------------

/// A JSON value, as written into the body.
#[derive(Debug, Clone)]
enum Json {
    /// A string; `escaped` writes every character as `\uXXXX`, so that it
    /// cannot be borrowed from the body.
    Str {
        text: &'static str,
        escaped: bool,
    },
    /// Any other scalar, as JSON text.
    Scalar(&'static str),
    List(Vec<Json>),
    Map(Vec<(&'static str, Json)>),
    /// `n` lists nested in one another.
    Deep(usize),
}

/// A field of an object: left out, `null`, a value, or its key sent twice.
#[derive(Debug, Clone)]
enum Field {
    Missing,
    Value(Json),
    Twice(Json, Json),
}

#[derive(Debug, Clone)]
struct Meta {
    uid: Field,
    finalizers: Field,
    deletion_timestamp: Field,
    annotations: Field,
    /// Fields no decision reads: labels, managedFields.
    labels: Field,
    managed_fields: usize,
}

#[derive(Debug, Clone)]
enum ObjectShape {
    Missing,
    Null,
    /// Not an object.
    Scalar(&'static str),
    Object {
        metadata: Option<Box<Meta>>,
        /// `metadata` is `null`.
        null_metadata: bool,
        spec: Field,
        /// `data`, nested this deep: skipped whatever its depth.
        data: usize,
    },
}

#[derive(Debug, Clone)]
struct Body {
    uid: Field,
    namespace_finalize: bool,
    old: ObjectShape,
    new: ObjectShape,
}

fn write_json(out: &mut String, value: &Json) {
    match value {
        Json::Str {
            text,
            escaped: false,
        } => out.push_str(&serde_json::to_string(text).unwrap()),
        Json::Str {
            text,
            escaped: true,
        } => {
            out.push('"');
            for unit in text.encode_utf16() {
                let _ = write!(out, "\\u{unit:04x}");
            }
            out.push('"');
        }
        Json::Scalar(text) => out.push_str(text),
        Json::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, item);
            }
            out.push(']');
        }
        Json::Map(entries) => {
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", serde_json::to_string(key).unwrap());
                write_json(out, value);
            }
            out.push('}');
        }
        Json::Deep(n) => {
            out.push_str(&"[".repeat(*n));
            out.push_str(&"]".repeat(*n));
        }
    }
}

/// Writes `"key":value` (twice for [`Field::Twice`]), each followed by a comma.
fn write_field(out: &mut String, key: &str, field: &Field) {
    let mut one = |value: &Json| {
        let _ = write!(out, "{}:", serde_json::to_string(key).unwrap());
        write_json(out, value);
        out.push(',');
    };
    match field {
        Field::Missing => {}
        Field::Value(v) => one(v),
        Field::Twice(a, b) => {
            one(a);
            one(b);
        }
    }
}

fn write_object(out: &mut String, shape: &ObjectShape) {
    match shape {
        ObjectShape::Missing => unreachable!("a missing object is not written"),
        ObjectShape::Null => out.push_str("null"),
        ObjectShape::Scalar(text) => out.push_str(text),
        ObjectShape::Object {
            metadata,
            null_metadata,
            spec,
            data,
        } => {
            out.push_str(r#"{"apiVersion":"v1","kind":"Pod","#);
            match metadata {
                Some(m) => {
                    out.push_str(r#""metadata":{"name":"web-0","#);
                    write_field(out, "uid", &m.uid);
                    write_field(out, "finalizers", &m.finalizers);
                    write_field(out, "deletionTimestamp", &m.deletion_timestamp);
                    write_field(out, "annotations", &m.annotations);
                    write_field(out, "labels", &m.labels);
                    let deep = Field::Value(Json::Deep(m.managed_fields));
                    write_field(out, "managedFields", &deep);
                    out.pop();
                    out.push_str("},");
                }
                None if *null_metadata => out.push_str(r#""metadata":null,"#),
                None => {}
            }
            write_field(out, "spec", spec);
            write_field(out, "data", &Field::Value(Json::Deep(*data)));
            out.pop();
            out.push('}');
        }
    }
}

impl Body {
    fn text(&self) -> String {
        let mut out = String::from(
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"#,
        );
        write_field(&mut out, "uid", &self.uid);
        out.push_str(r#""kind":{"group":"","version":"v1","kind":"Pod"},"#);
        if self.namespace_finalize {
            out.push_str(r#""resource":{"group":"","version":"v1","resource":"namespaces"},"subResource":"finalize","name":"legacy","#);
        } else {
            out.push_str(r#""resource":{"group":"","version":"v1","resource":"pods"},"name":"web-0","namespace":"team-a","#);
        }
        out.push_str(r#""operation":"UPDATE","userInfo":{"username":"alice","groups":["system:authenticated"]},"#);
        for (key, shape) in [("object", &self.new), ("oldObject", &self.old)] {
            if !matches!(shape, ObjectShape::Missing) {
                let _ = write!(out, "{}:", serde_json::to_string(key).unwrap());
                write_object(&mut out, shape);
                out.push(',');
            }
        }
        out.push_str(r#""dryRun":false}}"#);
        out
    }
}

// --- The model --------------------------------------------------------------

/// What the rules read from an object.
#[derive(Debug, Clone, Default, PartialEq)]
struct Read {
    uid: Option<String>,
    finalizers: Vec<String>,
    deleting: bool,
    annotations: BTreeMap<String, String>,
    spec_finalizers: Vec<String>,
    spec_finalizers_malformed: bool,
}

/// Why the rules refuse a body: the path of the field the reason must name.
type Refusal = String;

fn string(value: &Json) -> Option<String> {
    match value {
        Json::Str { text, .. } => Some(text.to_string()),
        _ => None,
    }
}

/// The items of a list, `None` for any other value.
fn items(value: &Json) -> Option<Vec<Json>> {
    match value {
        Json::List(items) => Some(items.clone()),
        Json::Deep(1) => Some(Vec::new()),
        Json::Deep(n) => Some(vec![Json::Deep(n - 1)]),
        _ => None,
    }
}

fn is_null(value: &Json) -> bool {
    matches!(value, Json::Scalar("null"))
}

/// A field's one value, or the refusal of a field sent twice (after the
/// first copy is read: its own refusal comes first).
fn once<T>(
    field: &Field,
    parent: &str,
    read: impl Fn(&Json) -> Result<T, Refusal>,
) -> Result<Option<T>, Refusal> {
    match field {
        Field::Missing => Ok(None),
        Field::Value(v) => read(v).map(Some),
        Field::Twice(a, _) => {
            read(a)?;
            Err(parent.to_string())
        }
    }
}

/// `metadata.finalizers`: `null` is empty, otherwise a list of strings.
fn finalizer_list(value: &Json, path: &str) -> Result<Vec<String>, Refusal> {
    if is_null(value) {
        return Ok(Vec::new());
    }
    let items = items(value).ok_or_else(|| path.to_string())?;
    items
        .iter()
        .map(|item| string(item).ok_or_else(|| path.to_string()))
        .collect()
}

/// `spec.finalizers`: the strings, and whether anything was of another shape.
fn spec_list(value: &Json) -> (Vec<String>, bool) {
    if is_null(value) {
        return (Vec::new(), false);
    }
    match items(value) {
        Some(items) => {
            let names: Vec<String> = items.iter().filter_map(string).collect();
            let malformed = names.len() != items.len();
            (names, malformed)
        }
        None => (Vec::new(), true),
    }
}

fn spec(value: &Json, path: &str) -> Result<(Vec<String>, bool), Refusal> {
    match value {
        _ if is_null(value) => Ok((Vec::new(), false)),
        Json::Map(entries) => {
            let lists: Vec<&Json> = entries
                .iter()
                .filter(|(k, _)| *k == "finalizers")
                .map(|(_, v)| v)
                .collect();
            match lists.as_slice() {
                [] => Ok((Vec::new(), false)),
                [one] => Ok(spec_list(one)),
                _ => Err(path.to_string()),
            }
        }
        _ => Ok((Vec::new(), true)),
    }
}

fn annotations(value: &Json, path: &str) -> Result<BTreeMap<String, String>, Refusal> {
    match value {
        _ if is_null(value) => Ok(BTreeMap::new()),
        Json::Map(entries) => {
            let mut out = BTreeMap::new();
            for (key, value) in entries {
                if let Some(value) = string(value) {
                    out.insert(key.to_string(), value);
                }
            }
            Ok(out)
        }
        _ => Err(path.to_string()),
    }
}

fn uid(value: &Json, path: &str) -> Result<Option<String>, Refusal> {
    match value {
        _ if is_null(value) => Ok(None),
        Json::Str { text, .. } => Ok(Some(text.to_string())),
        _ => Err(path.to_string()),
    }
}

/// What the rules read from `shape` at `path` (`request.object`), `None`
/// where there is no object.
fn model_object(shape: &ObjectShape, path: &str) -> Result<Option<Read>, Refusal> {
    let (metadata, spec_field) = match shape {
        ObjectShape::Missing | ObjectShape::Null => return Ok(None),
        ObjectShape::Scalar(_) => return Err(path.to_string()),
        ObjectShape::Object { metadata, spec, .. } => (metadata, spec),
    };
    let mut read = Read::default();
    if let Some(m) = metadata {
        let meta = format!("{path}.metadata");
        let at = |field: &str| format!("{meta}.{field}");
        read.uid = once(&m.uid, &meta, |v| uid(v, &at("uid")))?.flatten();
        read.finalizers = once(&m.finalizers, &meta, |v| {
            finalizer_list(v, &at("finalizers"))
        })?
        .unwrap_or_default();
        read.deleting = once(&m.deletion_timestamp, &meta, |v| {
            Ok(string(v).is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()))
        })?
        .unwrap_or(false);
        read.annotations = once(&m.annotations, &meta, |v| {
            annotations(v, &at("annotations"))
        })?
        .unwrap_or_default();
        // Labels and managedFields are skipped whatever their shape, even sent twice.
    }
    let spec_path = format!("{path}.spec");
    if let Some((names, malformed)) = once(spec_field, path, |v| spec(v, &spec_path))? {
        read.spec_finalizers = names;
        read.spec_finalizers_malformed = malformed;
    }
    Ok(Some(read))
}

#[derive(Debug, PartialEq)]
struct Expected {
    uid: String,
    old: Option<Read>,
    new: Option<Read>,
}

/// What the rules read from the body, in the order it is written.
fn model(body: &Body) -> Result<Expected, Refusal> {
    let uid = match &body.uid {
        Field::Missing => return Err("request".into()),
        Field::Value(v) => string(v).ok_or("request.uid")?,
        Field::Twice(a, _) => {
            string(a).ok_or("request.uid")?;
            return Err("request".into());
        }
    };
    let new = model_object(&body.new, "request.object")?;
    let old = model_object(&body.old, "request.oldObject")?;
    Ok(Expected { uid, old, new })
}

// --- The strategies ---------------------------------------------------------

fn json_string() -> impl Strategy<Value = Json> {
    (select(NAMES), any::<bool>()).prop_map(|(text, escaped)| Json::Str { text, escaped })
}

/// `null`, a number, a boolean, or a map that is no list and holds no string.
fn scalar() -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => select(&["null", "7", "-1.5", "true", "false"][..]).prop_map(Json::Scalar),
        1 => Just(Json::Map(Vec::new())),
        1 => Just(Json::Map(vec![("a", Json::Scalar("1"))])),
    ]
}

/// Any value: mostly of the expected shapes, often not.
fn value(expected: BoxedStrategy<Json>) -> BoxedStrategy<Json> {
    prop_oneof![
        24 => expected,
        1 => json_string(),
        1 => scalar(),
        1 => (1..200usize).prop_map(Json::Deep),
    ]
    .boxed()
}

fn field(value: BoxedStrategy<Json>) -> impl Strategy<Value = Field> {
    prop_oneof![
        4 => Just(Field::Missing),
        40 => value.clone().prop_map(Field::Value),
        1 => (value.clone(), value).prop_map(|(a, b)| Field::Twice(a, b)),
    ]
}

fn name_list() -> BoxedStrategy<Json> {
    let item =
        prop_oneof![30 => json_string(), 1 => scalar(), 1 => (1..5usize).prop_map(Json::Deep)];
    vec(item, 0..5).prop_map(Json::List).boxed()
}

fn string_map() -> BoxedStrategy<Json> {
    let entry = (select(KEYS), value(json_string().boxed()));
    vec(entry, 0..5).prop_map(Json::Map).boxed()
}

fn timestamp() -> BoxedStrategy<Json> {
    select(&[TIMESTAMP, "2026-11-21", "not a time"][..])
        .prop_map(|text| Json::Str {
            text,
            escaped: false,
        })
        .boxed()
}

fn spec_value() -> BoxedStrategy<Json> {
    let entry = (
        select(&["finalizers", "replicas", "template"][..]),
        value(name_list()),
    );
    vec(entry, 0..3).prop_map(Json::Map).boxed()
}

fn meta() -> impl Strategy<Value = Meta> {
    (
        field(value(json_string().boxed())),
        field(value(name_list())),
        field(value(timestamp())),
        field(value(string_map())),
        field(value(string_map())),
        1..300usize,
    )
        .prop_map(
            |(uid, finalizers, deletion_timestamp, annotations, labels, managed_fields)| Meta {
                uid,
                finalizers,
                deletion_timestamp,
                annotations,
                labels,
                managed_fields,
            },
        )
}

fn object() -> impl Strategy<Value = ObjectShape> {
    prop_oneof![
        1 => Just(ObjectShape::Missing),
        1 => Just(ObjectShape::Null),
        1 => select(&["\"web-0\"", "7", "true"][..]).prop_map(ObjectShape::Scalar),
        12 => (proptest::option::weighted(0.9, meta().prop_map(Box::new)), any::<bool>(), field(value(spec_value())), 1..300usize)
            .prop_map(|(metadata, null_metadata, spec, data)| ObjectShape::Object {
                metadata,
                null_metadata,
                spec,
                data,
            }),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    let uid = prop_oneof![
        24 => json_string().prop_map(Field::Value),
        1 => Just(Field::Value(Json::Str { text: "", escaped: false })),
        1 => scalar().prop_map(Field::Value),
        1 => (json_string(), json_string()).prop_map(|(a, b)| Field::Twice(a, b)),
    ];
    (uid, any::<bool>(), object(), object()).prop_map(|(uid, namespace_finalize, old, new)| Body {
        uid,
        namespace_finalize,
        old,
        new,
    })
}

// --- The checks -------------------------------------------------------------

/// What the review's own parse read from an object.
fn wire(object: &Object<'_>) -> Read {
    Read {
        uid: object.uid.as_deref().map(String::from),
        finalizers: object.finalizers.iter().map(|f| f.to_string()).collect(),
        deleting: object.deleting,
        annotations: object.annotations_where(|_| true),
        spec_finalizers: object
            .spec_finalizers
            .iter()
            .map(|f| f.to_string())
            .collect(),
        spec_finalizers_malformed: object.spec_finalizers_malformed,
    }
}

/// What the owned request read from an object.
fn owned(object: &LeanObject) -> Read {
    let meta = &object.metadata;
    Read {
        uid: meta.uid.clone(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        spec_finalizers: object.spec_finalizers.clone(),
        spec_finalizers_malformed: object.spec_finalizers_malformed,
    }
}

fn removed(old: &Option<Read>, new: &Option<Read>, spec: bool) -> BTreeSet<String> {
    let names = |r: &Option<Read>| -> BTreeSet<String> {
        r.as_ref()
            .map(|r| {
                if spec {
                    r.spec_finalizers.clone()
                } else {
                    r.finalizers.clone()
                }
            })
            .unwrap_or_default()
            .into_iter()
            .collect()
    };
    names(old).difference(&names(new)).cloned().collect()
}

/// Whether the object's annotations hold the override annotation (the one
/// key of [`KEYS`] a decision reads) twice: the review refuses it, though the
/// parse reads it (the last string wins, as a recording keeps it).
fn twice_decided(shape: &ObjectShape) -> bool {
    let ObjectShape::Object {
        metadata: Some(meta),
        ..
    } = shape
    else {
        return false;
    };
    match &meta.annotations {
        Field::Value(Json::Map(entries)) => {
            entries.iter().filter(|(key, _)| *key == OVERRIDE).count() > 1
        }
        _ => false,
    }
}

fn check(body: &Body, policy: &Policy) -> Result<(), TestCaseError> {
    let text = body.text();
    let bytes = text.as_bytes();
    let want = model(body);
    let parsed = admission::parse(bytes);
    let owned_request = admission::parse_owned(bytes);
    let reviewed = admission::review(policy, bytes);
    match (&want, &parsed) {
        (Err(path), Err(error)) => {
            // One reading: the same reason everywhere, naming the field.
            prop_assert_eq!(owned_request.as_ref().err(), Some(error), "{}", text);
            prop_assert_eq!(reviewed.as_ref().err(), Some(error), "{}", text);
            let reason = error.to_string();
            prop_assert!(
                [':', '.', '[']
                    .iter()
                    .any(|c| reason.contains(&format!("{path}{c}"))),
                "want the reason to name {path}: {reason}\n{text}"
            );
            return Ok(());
        }
        (Ok(want), Err(ReviewError::NoUid)) if want.uid.is_empty() => {
            prop_assert_eq!(owned_request.as_ref().err(), Some(&ReviewError::NoUid));
            prop_assert_eq!(reviewed.as_ref().err(), Some(&ReviewError::NoUid));
            return Ok(());
        }
        (Ok(_), Ok(_)) => {}
        _ => prop_assert!(
            false,
            "the model says {want:?}, the parse {:?}\n{text}",
            parsed.as_ref().err()
        ),
    }
    let want = want.expect("read");
    let (_, request) = parsed.expect("read");
    let owned_request =
        owned_request.map_err(|e| TestCaseError::fail(format!("owned: {e}\n{text}")))?;

    // The review's parse, the owned request and the model read the same.
    let got = Expected {
        uid: request.uid.to_string(),
        old: request.old_object.as_ref().map(wire),
        new: request.object.as_ref().map(wire),
    };
    prop_assert_eq!(&got, &want, "the review's parse\n{}", text);
    let got_owned = Expected {
        uid: owned_request.uid.clone(),
        old: owned_request.old_object.as_ref().map(owned),
        new: owned_request.object.as_ref().map(owned),
    };
    prop_assert_eq!(&got_owned, &want, "the owned request\n{}", text);

    // And the review answers what it read: the uid, each removal.
    let finalize_malformed = |r: &Option<Read>| {
        body.namespace_finalize && r.as_ref().is_some_and(|r| r.spec_finalizers_malformed)
    };
    let expected_error = if twice_decided(&body.new) {
        Some(ReviewError::DuplicateAnnotation {
            object: "request.object",
            key: OVERRIDE.into(),
        })
    } else if twice_decided(&body.old) {
        Some(ReviewError::DuplicateAnnotation {
            object: "request.oldObject",
            key: OVERRIDE.into(),
        })
    } else if want.new.is_none() {
        Some(ReviewError::NoObject("object"))
    } else if want.old.is_none() {
        Some(ReviewError::NoObject("oldObject"))
    } else if finalize_malformed(&want.old) {
        Some(ReviewError::NotFinalizerList("request.oldObject"))
    } else if finalize_malformed(&want.new) {
        Some(ReviewError::NotFinalizerList("request.object"))
    } else {
        None
    };
    let reviewed = match (reviewed, expected_error) {
        (Err(e), Some(want)) => {
            prop_assert_eq!(e, want, "{}", text);
            return Ok(());
        }
        (Ok(reviewed), None) => reviewed,
        (got, want) => {
            return Err(TestCaseError::fail(format!(
                "review: {:?}, want {want:?}\n{text}",
                got.err()
            )));
        }
    };
    let answer: serde_json::Value = serde_json::from_slice(&reviewed.body).unwrap();
    prop_assert_eq!(answer["response"]["uid"].as_str(), Some(want.uid.as_str()));
    let audit = reviewed.audit_record();
    let audited = |path: &str| -> BTreeSet<String> {
        audit
            .iter()
            .flat_map(|a| &a.removed_finalizers)
            .filter(|r| r.field.path() == path)
            .map(|r| r.finalizer.clone())
            .collect()
    };
    prop_assert_eq!(
        audited("metadata.finalizers"),
        removed(&want.old, &want.new, false),
        "{}",
        text
    );
    let spec_removed = if body.namespace_finalize {
        removed(&want.old, &want.new, true)
    } else {
        BTreeSet::new()
    };
    prop_assert_eq!(audited("spec.finalizers"), spec_removed, "{}", text);
    if let Some(audit) = &audit {
        let object_uid = want
            .old
            .as_ref()
            .and_then(|o| o.uid.clone())
            .filter(|u| !u.is_empty());
        prop_assert_eq!(&audit.object_uid, &object_uid, "{}", text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1024),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_review_and_the_owned_request_read_the_same(body in body()) {
        check(&body, &Policy::embedded_default())?;
    }
}

/// The model is not vacuous: each rule's outcomes are reached.
#[test]
fn the_strategies_reach_every_shape() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut refused, mut read, mut removals, mut malformed, mut escaped) = (0, 0, 0, 0, 0);
    let mut override_twice = 0;
    for _ in 0..2000 {
        let body = body().new_tree(&mut runner).unwrap().current();
        escaped += body.text().contains("\\u00") as usize;
        override_twice += (twice_decided(&body.new) || twice_decided(&body.old)) as usize;
        match model(&body) {
            Err(p) => {
                refused += 1;
                eprintln!("R {p}");
            }
            Ok(e) => {
                read += 1;
                removals += !removed(&e.old, &e.new, false).is_empty() as usize;
                malformed += [&e.old, &e.new]
                    .iter()
                    .any(|r| r.as_ref().is_some_and(|r| r.spec_finalizers_malformed))
                    as usize;
            }
        }
    }
    for (what, n) in [
        ("refused", refused),
        ("read", read),
        ("with a removal", removals),
        ("with a malformed spec.finalizers", malformed),
        ("with an escaped string", escaped),
        ("with the override annotation twice", override_twice),
    ] {
        assert!(n >= 100, "only {n} of 2000 bodies {what}");
    }
}
