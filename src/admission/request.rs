//! The one reading of an AdmissionReview: the request as a review reads it,
//! borrowed from the body, and the rules by which each field's shape reads.
//!
//! Every string a decision reads (uid, kind, resource, names, requester,
//! finalizers) points into the body unless JSON escapes make it differ from
//! its bytes; everything no decision reads (`options`, `requestKind`,
//! `requestResource`, the objects' `spec`, `status`, `data`,
//! `managedFields`, labels and most annotations) is skipped by the parser,
//! never built. The same reading serves the review, the reason a body is
//! refused (the same types, tracking the path) and the owned request a
//! recording keeps ([`super::lean`]): a finalizer list, `spec.finalizers`,
//! an annotation or a uid reads one way wherever it is read.
//!
//! The rules, where a shape is not the expected one:
//! - `metadata.finalizers`, `userInfo.groups`: `null` is empty; anything
//!   but a list of strings is refused, since a list read as empty could
//!   hide a removal.
//! - `spec.finalizers`: read only where `spec` is an object holding a list;
//!   any other shape reads as empty but is remembered as malformed (a custom
//!   resource's `spec` can be anything; a Namespace's is judged).
//! - annotations: `null` is empty, a value that is not a string reads as
//!   absent (an override that is simply not there); not a map is refused.
//! - `metadata.deletionTimestamp`: a timestamp, or absent.
//! - a duplicated field a decision reads is refused: neither copy may win.
//! - fields no decision reads (the identity a recording keeps, the leak
//!   ledger): `IfString`, `IfObject`, `IfList` read any other shape
//!   as absent, never as a failure.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use kube_core::admission::Operation;
use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// An AdmissionReview: its type, and the request.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review<'a> {
    #[serde(borrow)]
    pub api_version: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow, default)]
    pub request: Option<Request<'a>>,
}

/// `request`, as far as a review reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", expecting = "struct AdmissionRequest")]
pub struct Request<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Kind<'a>,
    #[serde(borrow)]
    pub resource: Resource<'a>,
    #[serde(borrow, default)]
    pub sub_resource: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub namespace: Option<Text<'a>>,
    pub operation: Operation,
    #[serde(borrow)]
    pub user_info: UserInfo<'a>,
    #[serde(borrow, default)]
    pub object: Option<Object<'a>>,
    #[serde(borrow, default)]
    pub old_object: Option<Object<'a>>,
    #[serde(default)]
    pub dry_run: bool,
}

/// `request.kind`.
#[derive(Deserialize)]
#[serde(expecting = "struct GroupVersionKind")]
pub struct Kind<'a> {
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

/// `request.resource`.
#[derive(Deserialize)]
#[serde(expecting = "struct GroupVersionResource")]
pub struct Resource<'a> {
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
}

/// `request.userInfo`. `extra` is checked for its shape (a map of lists of
/// strings, as kube-core reads it) but not kept: no decision reads it.
#[derive(Deserialize)]
pub struct UserInfo<'a> {
    #[serde(borrow, default)]
    pub username: Option<Text<'a>>,
    #[serde(borrow, default, deserialize_with = "names")]
    pub groups: Vec<Cow<'a, str>>,
    #[serde(default, rename = "extra")]
    _extra: Option<Extra>,
}

/// An object as a decision reads it: its uid, its finalizers, when it is
/// being deleted, its annotations (values unread until asked for), and
/// `spec.finalizers` (a Namespace's).
#[derive(Default)]
pub struct Object<'a> {
    pub uid: Option<Cow<'a, str>>,
    pub finalizers: Vec<Cow<'a, str>>,
    /// `metadata.deletionTimestamp` is set (to a timestamp).
    pub deleting: bool,
    /// Every annotation, its value as the JSON text it was sent as.
    pub annotations: Vec<(Cow<'a, str>, &'a RawValue)>,
    pub spec_finalizers: Vec<Cow<'a, str>>,
    /// `spec` or `spec.finalizers` was there but of another shape than an
    /// object holding a list of strings; `spec_finalizers` then holds only
    /// the strings found, if any.
    pub spec_finalizers_malformed: bool,
}

impl Object<'_> {
    /// The annotations whose keys `wanted` accepts, decoded. A value that is
    /// not a string reads as absent, as kube-apiserver never sends one; of a
    /// key sent twice, the last string wins.
    pub fn annotations_where(&self, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
        self.annotations
            .iter()
            .filter(|(key, _)| wanted(key))
            .filter_map(|(key, value)| Some((key.to_string(), annotation_value(value)?)))
            .collect()
    }
}

/// An annotation's value: a string, or absent for any other JSON value.
fn annotation_value(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

impl<'de: 'a, 'a> Deserialize<'de> for Object<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(expecting = "an object")]
        struct Repr<'a> {
            #[serde(borrow, default)]
            metadata: Option<Meta<'a>>,
            #[serde(borrow, default)]
            spec: Option<Spec<'a>>,
        }
        let repr = Repr::deserialize(deserializer)?;
        let meta = repr.metadata.unwrap_or_default();
        let spec = repr.spec.unwrap_or_default();
        Ok(Object {
            uid: meta.uid.map(|t| t.0),
            finalizers: meta.finalizers,
            deleting: meta.deletion_timestamp.is_some_and(|t| t.0),
            annotations: meta.annotations.0,
            spec_finalizers: spec.names,
            spec_finalizers_malformed: spec.malformed,
        })
    }
}

/// The fields of `metadata` a decision reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", expecting = "struct ObjectMeta")]
struct Meta<'a> {
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default, deserialize_with = "names")]
    finalizers: Vec<Cow<'a, str>>,
    #[serde(default)]
    deletion_timestamp: Option<Timestamp>,
    #[serde(borrow, default)]
    annotations: Annotations<'a>,
}

/// A string borrowed from the body where it can be.
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor).map(Text)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// A list of names (`null` is empty), each borrowed where it can be.
fn names<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Cow<'a, str>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(Text(name)) = seq.next_element()? {
                out.push(name);
            }
            Ok(out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(V)
        }
    }
    deserializer.deserialize_option(V)
}

/// Whether the value is a timestamp; any other value reads as absent.
struct Timestamp(bool);

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = IfString::deserialize(deserializer)?;
        Ok(Timestamp(value.0.is_some_and(|t| timestamp(&t).is_ok())))
    }
}

/// A `metadata.deletionTimestamp` is set if its text is a timestamp.
fn timestamp(text: &str) -> Result<jiff::Timestamp, jiff::Error> {
    text.parse()
}

/// `metadata.annotations`: keys borrowed, values kept as their JSON text
/// (a `last-applied-configuration` is never unescaped). `null` is empty.
#[derive(Default)]
struct Annotations<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(Text(key)) = map.next_key()? {
                    out.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Annotations(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Annotations::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_map(V)
            }
        }
        deserializer.deserialize_option(V)
    }
}

/// `userInfo.extra`: a map of lists of strings, read and dropped.
struct Extra;

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Extra;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of lists of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_key::<IgnoredAny>()?.is_some() {
                    map.next_value::<Strings>()?;
                }
                Ok(Extra)
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// A list of strings, checked and dropped.
struct Strings;

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<Text<'de>>()?.is_some() {}
                Ok(Strings)
            }
        }
        deserializer.deserialize_seq(V)
    }
}

/// `spec.finalizers` when `spec` is an object holding a list of strings.
/// Any other shape reads as empty, since a custom resource's `spec` can be
/// anything, but is remembered as malformed: a Namespace's `spec.finalizers`
/// is judged, and there a list read as empty could hide a removal.
#[derive(Default)]
struct Spec<'a> {
    names: Vec<Cow<'a, str>>,
    malformed: bool,
}

impl Spec<'_> {
    fn malformed() -> Self {
        Spec {
            names: Vec::new(),
            malformed: true,
        }
    }
}

/// Visitor methods for the scalars: `null` is "nothing here" (the value's
/// `Default`), and so is any other scalar unless `$other` says what it is
/// instead. A string is left to the visitor unless `str` is named.
macro_rules! scalars {
    () => {
        scalars!(Self::Value::default());
    };
    ($other:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
    };
    ($other:expr, str) => {
        scalars!($other);
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
}

impl<'de: 'a, 'a> Deserialize<'de> for Spec<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Spec<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut finalizers: Option<Spec<'de>> = None;
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    if key.0 != "finalizers" {
                        map.next_value::<IgnoredAny>()?;
                    } else if finalizers.is_some() {
                        return Err(de::Error::duplicate_field("finalizers"));
                    } else {
                        finalizers = Some(map.next_value::<FinalizerList<'de>>()?.0);
                    }
                }
                Ok(finalizers.unwrap_or_default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Spec::malformed())
            }
            scalars!(Spec::malformed(), str);
        }
        deserializer.deserialize_any(V)
    }
}

/// `spec.finalizers`: the strings of a list, malformed for anything else.
struct FinalizerList<'a>(Spec<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for FinalizerList<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Spec<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of finalizer names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Spec::default();
                while let Some(item) = seq.next_element::<IfString<'de>>()? {
                    match item.0 {
                        Some(name) => out.names.push(name),
                        None => out.malformed = true,
                    }
                }
                Ok(out)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Spec::malformed())
            }
            scalars!(Spec::malformed(), str);
        }
        deserializer.deserialize_any(V).map(FinalizerList)
    }
}

/// A string, borrowed where it can be, or `None` for any other value.
#[derive(Default)]
pub(crate) struct IfString<'a>(pub(crate) Option<Cow<'a, str>>);

impl IfString<'_> {
    /// The string, unless absent, of another shape, or empty.
    pub(crate) fn non_empty(self) -> Option<String> {
        self.0.filter(|s| !s.is_empty()).map(Cow::into_owned)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for IfString<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IfString<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(IfString(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(IfString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IfString(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IfString(None))
            }
            scalars!();
        }
        deserializer.deserialize_any(V)
    }
}

/// A `T` where the value is an object; `None` for any other value.
pub(crate) struct IfObject<T>(pub(crate) Option<T>);

impl<T> Default for IfObject<T> {
    fn default() -> Self {
        IfObject(None)
    }
}

impl<T: Default> IfObject<T> {
    /// The `T` read, or its default where there was no object.
    pub(crate) fn or_default(self) -> T {
        self.0.unwrap_or_default()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for IfObject<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = IfObject<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| IfObject(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IfObject(None))
            }
            scalars!(IfObject(None), str);
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// The items of a list; any other value reads as empty.
pub(crate) struct IfList<T>(pub(crate) Vec<T>);

impl<T> Default for IfList<T> {
    fn default() -> Self {
        IfList(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for IfList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = IfList<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(SeqAccessDeserializer::new(seq)).map(IfList)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IfList::default())
            }
            scalars!(IfList::default(), str);
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// A map's string values (labels); a value of another shape reads as absent,
/// as an annotation's does.
#[derive(Default)]
pub(crate) struct StringMap(pub(crate) BTreeMap<String, String>);

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((key, value)) = map.next_entry::<String, IfString<'de>>()? {
                    if let Some(value) = value.0 {
                        out.insert(key, value.into_owned());
                    }
                }
                Ok(StringMap(out))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// The `metadata.deletionTimestamp` of `request.object` and
/// `request.oldObject`, for a recording (a review keeps only whether there is
/// one). Read on their own, they fail only on a body a review refuses too (a
/// key on the way sent twice, a timestamp that is not UTF-8): a recording
/// keeps the timestamp of every object a review reads as being deleted.
pub(crate) fn deletion_timestamps(body: &[u8]) -> [Option<jiff::Timestamp>; 2] {
    ["object", "oldObject"].map(|object| {
        let path = ["request", object, "metadata", "deletionTimestamp"];
        let mut de = serde_json::Deserializer::from_slice(body);
        let text = At(&path).deserialize(&mut de).ok().flatten();
        text.and_then(|t| timestamp(&t).ok())
    })
}

/// The string at a path of keys; any other shape on the way reads as absent,
/// and everything off the way is skipped unread.
struct At<'p>(&'p [&'p str]);

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            [] => IfString::deserialize(deserializer).map(|s| s.0),
            [key, rest @ ..] => deserializer.deserialize_any(AtKey(key, rest)),
        }
    }
}

struct AtKey<'p>(&'p str, &'p [&'p str]);

impl<'de> Visitor<'de> for AtKey<'_> {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(Text(key)) = map.next_key()? {
            if key != self.0 {
                map.next_value::<IgnoredAny>()?;
            } else if found.is_some() {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    self.0
                )));
            } else {
                found = Some(map.next_value_seed(At(self.1))?);
            }
        }
        Ok(found.flatten())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    scalars!(None, str);
}
