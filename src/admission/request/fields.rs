//! The request as a review reads it: the AdmissionReview, its request and
//! objects, the annotations, `userInfo.extra` and `spec.finalizers`, each
//! field by the rules of its shape ([`super`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use kube_core::admission::Operation;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::lenient::{IfString, scalars, timestamp};
use super::scan::{FinalizerNames, Text, finalizer_names, names};
use crate::admission::cut::cut;
use crate::policy::MAX_LIST_NAMES;

/// Reads `T` from a body. A body that is UTF-8, as every body kube-apiserver
/// sends, is read as text, whose strings need no UTF-8 check each (one check
/// of the whole body costs less than one of every key); any other body is
/// read as bytes, with the same result and the same errors as ever.
pub(crate) fn from_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match simdutf8::basic::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

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
    pub kind: RequestKind<'a>,
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
pub struct RequestKind<'a> {
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
/// strings, as kube-core reads it) and kept bounded for the audit record
/// ([`Extra`]): no decision reads it.
#[derive(Deserialize)]
pub struct UserInfo<'a> {
    #[serde(borrow, default)]
    pub username: Option<Text<'a>>,
    #[serde(borrow, default, deserialize_with = "names")]
    pub groups: Vec<Cow<'a, str>>,
    #[serde(default)]
    pub extra: Option<Extra>,
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
    /// `metadata.finalizers` held more than [`MAX_LIST_NAMES`] names:
    /// `finalizers` is empty, the names unread.
    pub finalizers_too_many: bool,
    /// `spec.finalizers` held more than [`MAX_LIST_NAMES`] names:
    /// `spec_finalizers` is empty, the names unread.
    pub spec_finalizers_too_many: bool,
    /// What the leak ledger reads, as sent: skipped like any field no
    /// decision reads, and read only for an override.
    pub ledger: LedgerParts<'a>,
}

/// The fields of an object the leak ledger reads, each kept as its JSON
/// text: `metadata.ownerReferences`, `status`, and four fields of `spec`
/// (where it is an object; of a field sent twice, the last).
#[derive(Default)]
pub struct LedgerParts<'a> {
    pub owner_references: Option<&'a RawValue>,
    pub spec: LedgerSpecParts<'a>,
    pub status: Option<&'a RawValue>,
}

/// The fields of `spec` the leak ledger reads, as sent.
#[derive(Default)]
pub struct LedgerSpecParts<'a> {
    pub node_name: Option<&'a RawValue>,
    pub volumes: Option<&'a RawValue>,
    pub csi: Option<&'a RawValue>,
    pub volume_name: Option<&'a RawValue>,
}

impl<'a> LedgerSpecParts<'a> {
    /// Where `field` is kept, if the ledger reads it.
    fn slot(&mut self, field: &str) -> Option<&mut Option<&'a RawValue>> {
        match field {
            "nodeName" => Some(&mut self.node_name),
            "volumes" => Some(&mut self.volumes),
            "csi" => Some(&mut self.csi),
            "volumeName" => Some(&mut self.volume_name),
            _ => None,
        }
    }
}

impl Object<'_> {
    /// The annotations whose keys `wanted` accepts, decoded. A value that is
    /// not a string reads as absent, as kube-apiserver never sends one; of a
    /// key sent twice, the last string wins (what a recording keeps: the
    /// decision reads through [`Object::decided_annotations`]).
    pub fn annotations_where(&self, wanted: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
        self.annotations
            .iter()
            .filter(|(key, _)| wanted(key))
            .filter_map(|(key, value)| Some((key.to_string(), annotation_value(value)?)))
            .collect()
    }

    /// The annotations a decision reads (those whose keys `wanted` accepts),
    /// decoded as [`Object::annotations_where`] decodes them; but such a key
    /// sent twice is refused, `Err` naming it: neither copy may win (an
    /// override followed by `null` is not an override that is there, nor
    /// one that is not). kube-apiserver never sends a key twice.
    pub fn decided_annotations(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        // The few keys a decision reads, each seen once at most.
        let mut seen: Vec<&str> = Vec::new();
        for (key, value) in &self.annotations {
            if !wanted(key) {
                continue;
            }
            if seen.contains(&&**key) {
                return Err(key.to_string());
            }
            seen.push(key);
            if let Some(value) = annotation_value(value) {
                out.insert(key.to_string(), value);
            }
        }
        Ok(out)
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
            spec: Option<SpecFinalizers<'a>>,
            #[serde(borrow, default)]
            status: Option<&'a RawValue>,
        }
        let repr = Repr::deserialize(deserializer)?;
        let meta = repr.metadata.unwrap_or_default();
        let spec = repr.spec.unwrap_or_default();
        Ok(Object {
            uid: meta.uid.map(|t| t.0),
            finalizers_too_many: meta.finalizers.too_many,
            finalizers: meta.finalizers.names,
            deleting: meta.deletion_timestamp.is_some_and(|t| t.0),
            annotations: meta.annotations.0,
            spec_finalizers: spec.names,
            spec_finalizers_malformed: spec.malformed,
            spec_finalizers_too_many: spec.too_many,
            ledger: LedgerParts {
                owner_references: meta.owner_references,
                spec: spec.ledger,
                status: repr.status,
            },
        })
    }
}

/// The fields of `metadata` a decision reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", expecting = "struct ObjectMeta")]
struct Meta<'a> {
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default, deserialize_with = "finalizer_names")]
    finalizers: FinalizerNames<'a>,
    #[serde(default)]
    deletion_timestamp: Option<Timestamp>,
    #[serde(borrow, default)]
    annotations: RawAnnotations<'a>,
    #[serde(borrow, default)]
    owner_references: Option<&'a RawValue>,
}

/// Whether the value is a timestamp; any other value reads as absent.
struct Timestamp(bool);

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = IfString::deserialize(deserializer)?;
        Ok(Timestamp(value.0.is_some_and(|t| timestamp(&t).is_ok())))
    }
}

/// `metadata.annotations`: keys borrowed, values kept as their JSON text
/// (a `last-applied-configuration` is never unescaped). `null` is empty.
#[derive(Default)]
struct RawAnnotations<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for RawAnnotations<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawAnnotationsVisitor;
        impl<'de> Visitor<'de> for RawAnnotationsVisitor {
            type Value = RawAnnotations<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(Text(key)) = map.next_key()? {
                    out.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(RawAnnotations(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(RawAnnotations::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(RawAnnotations::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_map(RawAnnotationsVisitor)
            }
        }
        deserializer.deserialize_option(RawAnnotationsVisitor)
    }
}

/// Most `userInfo.extra` keys kept (the first in the body; the rest are
/// checked for their shape and dropped).
pub const MAX_EXTRA_KEYS: usize = 16;
/// Most values kept of one `userInfo.extra` key (the first).
pub const MAX_EXTRA_VALUES: usize = 16;

/// `userInfo.extra` (what an authenticator adds: a token's credential id,
/// the node and pod a ServiceAccount token was bound to): a map of lists of
/// strings, kept bounded, at most [`MAX_EXTRA_KEYS`] keys and
/// [`MAX_EXTRA_VALUES`] values each, every key and value cut as the audit
/// record cuts its strings. Of two keys the same once cut, the first stays.
#[derive(Debug, Default)]
pub struct Extra(pub BTreeMap<String, Vec<String>>);

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExtraVisitor;
        impl<'de> Visitor<'de> for ExtraVisitor {
            type Value = Extra;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of lists of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kept = BTreeMap::new();
                let mut keys = 0;
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    if keys < MAX_EXTRA_KEYS {
                        keys += 1;
                        // `null` is an empty list: Go writes a nil one so.
                        let values = map
                            .next_value::<Option<ExtraValues>>()?
                            .map(|v| v.0)
                            .unwrap_or_default();
                        let key = cut(&key.0).into_owned();
                        kept.entry(key).or_insert(values);
                    } else {
                        map.next_value::<Option<Strings>>()?;
                    }
                }
                Ok(Extra(kept))
            }
        }
        deserializer.deserialize_map(ExtraVisitor)
    }
}

/// The values of one `userInfo.extra` key: the first [`MAX_EXTRA_VALUES`]
/// kept (cut), the rest checked and dropped.
struct ExtraValues(Vec<String>);

impl<'de> Deserialize<'de> for ExtraValues {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExtraValuesVisitor;
        impl<'de> Visitor<'de> for ExtraValuesVisitor {
            type Value = ExtraValues;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while let Some(value) = seq.next_element::<Text<'de>>()? {
                    if kept.len() < MAX_EXTRA_VALUES {
                        kept.push(cut(&value.0).into_owned());
                    }
                }
                Ok(ExtraValues(kept))
            }
        }
        deserializer.deserialize_seq(ExtraValuesVisitor)
    }
}

/// A list of strings, checked and dropped.
struct Strings;

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringsVisitor;
        impl<'de> Visitor<'de> for StringsVisitor {
            type Value = Strings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<Text<'de>>()?.is_some() {}
                Ok(Strings)
            }
        }
        deserializer.deserialize_seq(StringsVisitor)
    }
}

/// `spec.finalizers` when `spec` is an object holding a list of strings.
/// Any other shape reads as empty, since a custom resource's `spec` can be
/// anything, but is remembered as malformed: a Namespace's `spec.finalizers`
/// is judged, and there a list read as empty could hide a removal.
#[derive(Default)]
struct SpecFinalizers<'a> {
    names: Vec<Cow<'a, str>>,
    malformed: bool,
    /// More than [`MAX_LIST_NAMES`] names: `names` is empty.
    too_many: bool,
    /// The fields of `spec` the leak ledger reads ([`LedgerParts::spec`]).
    ledger: LedgerSpecParts<'a>,
}

impl SpecFinalizers<'_> {
    fn malformed() -> Self {
        SpecFinalizers {
            malformed: true,
            ..SpecFinalizers::default()
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for SpecFinalizers<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecFinalizersVisitor;
        impl<'de> Visitor<'de> for SpecFinalizersVisitor {
            type Value = SpecFinalizers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut finalizers: Option<SpecFinalizers<'de>> = None;
                let mut ledger = LedgerSpecParts::default();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    if key.0 == "finalizers" {
                        if finalizers.is_some() {
                            return Err(de::Error::duplicate_field("finalizers"));
                        }
                        finalizers = Some(map.next_value::<FinalizerList<'de>>()?.0);
                    } else if let Some(slot) = ledger.slot(&key.0) {
                        *slot = Some(map.next_value::<&'de RawValue>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(SpecFinalizers {
                    ledger,
                    ..finalizers.unwrap_or_default()
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(SpecFinalizers::malformed())
            }
            scalars!(SpecFinalizers::malformed(), str);
        }
        deserializer.deserialize_any(SpecFinalizersVisitor)
    }
}

/// `spec.finalizers`: the strings of a list, malformed for anything else.
struct FinalizerList<'a>(SpecFinalizers<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for FinalizerList<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FinalizerListVisitor;
        impl<'de> Visitor<'de> for FinalizerListVisitor {
            type Value = SpecFinalizers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of finalizer names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = SpecFinalizers::default();
                while let Some(item) = seq.next_element::<IfString<'de>>()? {
                    if out.names.len() == MAX_LIST_NAMES {
                        // Only a Namespace's is judged: past the cap the
                        // rest is skipped, nothing held, and the review
                        // decides what that means for it.
                        while seq.next_element::<IgnoredAny>()?.is_some() {}
                        return Ok(SpecFinalizers {
                            too_many: true,
                            ..SpecFinalizers::default()
                        });
                    }
                    match item.0 {
                        Some(name) => out.names.push(name),
                        None => out.malformed = true,
                    }
                }
                Ok(out)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(SpecFinalizers::malformed())
            }
            scalars!(SpecFinalizers::malformed(), str);
        }
        deserializer
            .deserialize_any(FinalizerListVisitor)
            .map(FinalizerList)
    }
}
