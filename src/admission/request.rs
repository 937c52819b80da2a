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
//!   absent (an override that is simply not there); not a map is refused;
//!   an annotation a decision reads (the override's, an approval's) sent
//!   twice is refused by the review ([`super::review::Annotations::read`]).
//! - `metadata.deletionTimestamp`: a timestamp, or absent.
//! - a duplicated field a decision reads is refused: neither copy may win.
//! - fields no decision reads (the identity a recording keeps, the leak
//!   ledger): `IfString`, `IfObject`, `IfList` read any other shape
//!   as absent, never as a failure.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use kube_core::admission::Operation;
use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Most names a list may hold (`metadata.finalizers`, `spec.finalizers`,
/// `userInfo.groups`). Each name read costs a decision far more memory than
/// its bytes in the body: a body of 8 MiB holds 940,000 tiny finalizers,
/// which took 180 MiB to judge. No object carries this many finalizers, nor
/// any user this many groups. A finalizer list longer is not held but
/// marked ([`Object::finalizers_too_many`]): an UPDATE it takes part in is
/// denied (would-deny in warn mode), never answered 400, which
/// kube-apiserver would settle by `failurePolicy`. A longer `groups`
/// (which only the authenticator sets) is refused (400).
pub use crate::policy::MAX_LIST_NAMES;

/// The reason a list longer than [`MAX_LIST_NAMES`] is refused.
fn too_many_names() -> String {
    format!("more than {MAX_LIST_NAMES} names: too many to judge")
}

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
            spec: Option<Spec<'a>>,
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
    finalizers: Listed<'a>,
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
///
/// A list with many names is most of what a review reads, so it is read in
/// one piece: serde_json skips it (checking its syntax, its escapes and
/// that no string holds a control character) and checks the UTF-8 of the
/// whole list at once, then [`string_list`] takes each name between its
/// quotes; only a name with escapes is decoded, by serde_json's rules (a
/// lone surrogate is refused). Anything but a list of strings is read again
/// the general way, for the reason serde gives.
fn names<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Cow<'a, str>>, D::Error> {
    let Some(raw) = Option::<&'de RawValue>::deserialize(deserializer)? else {
        return Ok(Vec::new());
    };
    read_names(raw.get()).map_err(de::Error::custom)
}

fn read_names(text: &str) -> Result<Vec<Cow<'_, str>>, String> {
    match string_list(text) {
        Some(names) => names,
        None => names_at_large(text),
    }
}

/// A finalizer list: its names, or none and `too_many` where it held more
/// than [`MAX_LIST_NAMES`].
#[derive(Default)]
struct Listed<'a> {
    names: Vec<Cow<'a, str>>,
    too_many: bool,
}

/// [`names`] for a finalizer list: past [`MAX_LIST_NAMES`] names, none
/// held and the list marked.
fn finalizer_names<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Listed<'a>, D::Error> {
    let Some(raw) = Option::<&'de RawValue>::deserialize(deserializer)? else {
        return Ok(Listed::default());
    };
    match read_names(raw.get()) {
        Ok(names) => Ok(Listed {
            names,
            too_many: false,
        }),
        Err(e) if e.ends_with(&too_many_names()) => Ok(Listed {
            names: Vec::new(),
            too_many: true,
        }),
        Err(e) => Err(de::Error::custom(e)),
    }
}

/// The strings of `text`, a JSON list of strings as serde_json skipped it:
/// syntax and escapes checked, UTF-8, no control characters in strings.
/// `None` where it is not a list of strings (another value, an item of
/// another type): the caller reads it the general way. A name whose escapes
/// do not decode (a lone surrogate) is the error.
fn string_list(text: &str) -> Option<Result<Vec<Cow<'_, str>>, String>> {
    let bytes = text.as_bytes();
    let open = skip_space(bytes, 0);
    if bytes.get(open) != Some(&b'[') {
        return None;
    }
    if memchr::memchr(b'\\', bytes).is_none() {
        // Without escapes every quote opens or closes a name: count them
        // before anything is held.
        if memchr::memchr_iter(b'"', bytes).count() > 2 * MAX_LIST_NAMES {
            return Some(Err(too_many_names()));
        }
        return plain_string_list(text, open + 1).map(Ok);
    }
    let mut out = Vec::new();
    let mut at = skip_space(bytes, open + 1);
    if bytes.get(at) == Some(&b']') {
        return Some(Ok(out));
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        if out.len() == MAX_LIST_NAMES {
            return Some(Err(too_many_names()));
        }
        let start = at + 1;
        let mut end = start + quote_or_backslash(bytes.get(start..)?);
        let mut escaped = false;
        // An escape is a backslash and at least one more byte; what ends the
        // string is the first quote no backslash escapes.
        while bytes.get(end) == Some(&b'\\') {
            escaped = true;
            let next = end + 2;
            end = next + quote_or_backslash(bytes.get(next..)?);
        }
        if bytes.get(end) != Some(&b'"') {
            return None;
        }
        if escaped {
            match serde_json::from_str::<String>(text.get(at..=end)?) {
                Ok(name) => out.push(Cow::Owned(name)),
                Err(e) => {
                    return Some(Err(format!("item {}: {}", out.len(), without_position(&e))));
                }
            }
        } else {
            out.push(Cow::Borrowed(text.get(start..end)?));
        }
        at = skip_space(bytes, end + 1);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            Some(b']') => return Some(Ok(out)),
            _ => return None,
        }
    }
}

/// [`string_list`] where the list holds no backslash: every quote opens or
/// closes a string, so the names are what lies between the quotes, each
/// borrowed. The quotes are found eight bytes at a time. `None` where
/// anything but whitespace and one comma lies between two strings (an item
/// of another type), or the list does not end after the last one.
fn plain_string_list(text: &str, after_bracket: usize) -> Option<Vec<Cow<'_, str>>> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let bytes = text.as_bytes();
    // Room for names of 13 bytes and more (`"`, name, `",`) without growing.
    let mut out = Vec::with_capacity(bytes.len() / 16);
    let mut names = Names {
        text,
        out: &mut out,
        opening: None,
        after: after_bracket,
        first: true,
    };
    let words = bytes.get(after_bracket..)?.chunks_exact(8);
    let tail = bytes.len() - words.remainder().len();
    for (base, chunk) in (after_bracket..).step_by(8).zip(words) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let x = w ^ (ONES * u64::from(b'"'));
        // The high bit of each byte of `x` that is zero: of each quote.
        let mut quotes = !(((x & LOWS) + LOWS) | x | LOWS);
        while quotes != 0 {
            names.quote(base + quotes.trailing_zeros() as usize / 8)?;
            quotes &= quotes - 1;
        }
    }
    for (at, &b) in bytes.iter().enumerate().skip(tail) {
        if b == b'"' {
            names.quote(at)?;
        }
    }
    names.end()?;
    Some(out)
}

/// The state of [`plain_string_list`]: the quotes seen so far.
struct Names<'t, 'o> {
    text: &'t str,
    out: &'o mut Vec<Cow<'t, str>>,
    /// Where the string being read opened.
    opening: Option<usize>,
    /// Just after the last string closed (or the list opened).
    after: usize,
    first: bool,
}

impl<'t> Names<'t, '_> {
    #[inline]
    fn quote(&mut self, at: usize) -> Option<()> {
        let bytes = self.text.as_bytes();
        match self.opening.take() {
            Some(opening) => {
                self.out
                    .push(Cow::Borrowed(self.text.get(opening + 1..at)?));
                self.after = at + 1;
            }
            None => {
                // Compact JSON has exactly the comma (or nothing, before the first).
                let between = bytes.get(self.after..at)?;
                let separated = if self.first {
                    between.iter().all(u8::is_ascii_whitespace)
                } else {
                    between == b"," || separator(between)
                };
                if !separated {
                    return None;
                }
                self.first = false;
                self.opening = Some(at);
            }
        }
        Some(())
    }

    /// The list ends after the last string closed.
    fn end(&self) -> Option<()> {
        let rest = self.text.as_bytes().get(self.after..)?;
        (self.opening.is_none() && rest.get(skip_space(rest, 0)) == Some(&b']')).then_some(())
    }
}

/// Whether `between` two strings of a list is one comma and whitespace.
fn separator(between: &[u8]) -> bool {
    let mut commas = 0;
    for b in between {
        match b {
            b',' => commas += 1,
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return false,
        }
    }
    commas == 1
}

/// How many leading bytes are neither a quote nor a backslash, eight at a
/// time. (In a string serde_json has checked there is no control character.)
#[inline]
fn quote_or_backslash(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The lowest byte of `w` that is zero has its high bit set in the result.
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let found = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if found != 0 {
            return at + found.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .unwrap_or(bytes.len() - at)
}

/// The index of the first byte from `at` that is not JSON whitespace.
fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// serde_json's reason, without where in `text` it is: the caller's
/// deserializer says where in the body.
fn without_position(error: &serde_json::Error) -> String {
    let reason = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    match reason.strip_suffix(&position) {
        Some(reason) => reason.to_string(),
        None => reason,
    }
}

/// A list of names read the general way, item by item: the reason a value
/// that is not a list of strings is refused.
fn names_at_large(text: &str) -> Result<Vec<Cow<'_, str>>, String> {
    struct V<'c>(&'c Cell<usize>);
    impl<'de> Visitor<'de> for V<'_> {
        type Value = Vec<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            self.0.set(0);
            while let Some(Text(name)) = seq.next_element()? {
                if out.len() == MAX_LIST_NAMES {
                    return Err(de::Error::custom(too_many_names()));
                }
                out.push(name);
                self.0.set(out.len());
            }
            Ok(out)
        }
    }
    let item = Cell::new(usize::MAX);
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_seq(V(&item)).map_err(|e| match item.get() {
        usize::MAX => without_position(&e),
        n => format!("item {n}: {}", without_position(&e)),
    })
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
        struct V;
        impl<'de> Visitor<'de> for V {
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
                        let key = super::cut::cut(&key.0).into_owned();
                        kept.entry(key).or_insert(values);
                    } else {
                        map.next_value::<Option<Strings>>()?;
                    }
                }
                Ok(Extra(kept))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// The values of one `userInfo.extra` key: the first [`MAX_EXTRA_VALUES`]
/// kept (cut), the rest checked and dropped.
struct ExtraValues(Vec<String>);

impl<'de> Deserialize<'de> for ExtraValues {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExtraValues;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while let Some(value) = seq.next_element::<Text<'de>>()? {
                    if kept.len() < MAX_EXTRA_VALUES {
                        kept.push(super::cut::cut(&value.0).into_owned());
                    }
                }
                Ok(ExtraValues(kept))
            }
        }
        deserializer.deserialize_seq(V)
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
    /// More than [`MAX_LIST_NAMES`] names: `names` is empty.
    too_many: bool,
}

impl Spec<'_> {
    fn malformed() -> Self {
        Spec {
            malformed: true,
            ..Spec::default()
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
                    if out.names.len() == MAX_LIST_NAMES {
                        // Only a Namespace's is judged: past the cap the
                        // rest is skipped, nothing held, and the review
                        // decides what that means for it.
                        while seq.next_element::<IgnoredAny>()?.is_some() {}
                        return Ok(Spec {
                            too_many: true,
                            ..Spec::default()
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
    pub(crate) fn text(&self) -> Option<&str> {
        self.0.as_deref().filter(|s| !s.is_empty())
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ReviewBuilder, ReviewError, parse};

    /// A review whose old object's `metadata.finalizers` is `list`, as bytes.
    fn body(list: &[u8]) -> Vec<u8> {
        let text = ReviewBuilder::pod_update("alice")
            .finalizers(json!("LIST"), json!(null))
            .to_vec();
        let at = text
            .windows(6)
            .position(|w| w == b"\"LIST\"")
            .expect("the placeholder");
        [&text[..at], list, &text[at + 6..]].concat()
    }

    /// The old object's finalizers as the review reads them.
    fn read(list: &[u8]) -> Result<Vec<String>, ReviewError> {
        let body = body(list);
        let (_, request) = parse(&body)?;
        let old = request.old_object.expect("an old object");
        Ok(old.finalizers.iter().map(|n| n.to_string()).collect())
    }

    /// What serde_json reads from the same list: `None` where it refuses it.
    fn general(list: &[u8]) -> Option<Vec<String>> {
        serde_json::from_slice::<Option<Vec<String>>>(list)
            .ok()
            .map(Option::unwrap_or_default)
    }

    #[test]
    fn lists_of_names_read_as_serde_json_reads_them() {
        let lists: &[&[u8]] = &[
            b"null",
            b"[]",
            b"[ ]",
            b"[\n]",
            br#"["a"]"#,
            br#"["example.com/a","example.com/b"]"#,
            br#"[ "a" , "b" ]"#,
            b"[\"a\",\n\t\"b\"\r\n]",
            br#"["a","","b"]"#,
            // Not ASCII: borrowed, checked by the list's one UTF-8 check.
            "[\"é/ü\",\"漢字\",\"🦀\"]".as_bytes(),
            // Escapes: decoded, wherever they are in the list.
            br#"["quote\"and\\back","a"]"#,
            br#"["a","\u00e9\u6f22","\ud83e\udd80","tab\there","slash\/"]"#,
            br#"["\"","\\"]"#,
            br#"["a",  "b\n"  ,"c"]"#,
        ];
        for list in lists {
            let text = String::from_utf8_lossy(list);
            let want = general(list).unwrap_or_else(|| panic!("serde_json reads {text}"));
            assert_eq!(read(list).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn what_is_not_a_list_of_names_is_refused() {
        let cases: &[(&[u8], &str)] = &[
            (br#""a""#, "expected a list of strings"),
            (b"{}", "expected a list of strings"),
            (b"7", "expected a list of strings"),
            (
                br#"["a",1]"#,
                "item 1: invalid type: integer `1`, expected a string",
            ),
            (br#"[1,"a"]"#, "item 0: invalid type: integer `1`"),
            (br#"["a",null]"#, "item 1: invalid type: null"),
            (br#"["a",["b"]]"#, "item 1: invalid type: sequence"),
            (br#"[{"a":"b"}]"#, "item 0: invalid type: map"),
            (br#"["a\n",{"b":"c"}]"#, "item 1: invalid type: map"),
            (br#"["a","b",true]"#, "item 2: invalid type: boolean"),
            // Lone surrogates are not text.
            (br#"["\ud800"]"#, "item 0: unexpected end of hex escape"),
            (br#"["a","\udc00"]"#, "item 1: lone leading surrogate"),
            (br#"["\ud800\u0041"]"#, "item 0: lone leading surrogate"),
            (br#"["\ud800x"]"#, "item 0: unexpected end of hex escape"),
        ];
        for (list, want) in cases {
            let text = String::from_utf8_lossy(list);
            assert!(general(list).is_none(), "serde_json refuses {text}");
            let reason = read(list).unwrap_err().to_string();
            assert!(
                reason.contains("request.oldObject.metadata.finalizers: ") && reason.contains(want),
                "{text}: {reason}"
            );
        }
    }

    #[test]
    fn a_list_that_is_not_json_is_refused_as_not_json() {
        let cases: &[&[u8]] = &[
            // Invalid UTF-8 in a name, borrowed or escaped.
            b"[\"a\xff\"]",
            b"[\"ok\",\"\xc3\"]",
            b"[\"\\n\xed\xa0\x80\"]",
            // A control character, a bad escape, broken syntax.
            b"[\"a\x01\"]",
            b"[\"a\\x\"]",
            b"[\"a\",,\"b\"]",
            b"[\"a\" \"b\"]",
            b"[\"a\"",
        ];
        for list in cases {
            let text = String::from_utf8_lossy(list);
            assert!(
                matches!(read(list), Err(ReviewError::NotJson(_))),
                "{text}: {:?}",
                read(list)
            );
        }
    }

    #[test]
    fn a_deep_list_is_refused_without_recursion() {
        let deep = format!("[\"a\",{}{}]", "[".repeat(100_000), "]".repeat(100_000));
        let reason = read(deep.as_bytes()).unwrap_err().to_string();
        assert!(
            reason.contains("item 1: invalid type: sequence"),
            "{reason}"
        );
    }

    #[test]
    fn names_without_escapes_are_borrowed() {
        let body = body("[\"example.com/a\",\"é\",\"b\\\"c\"]".as_bytes());
        let (_, request) = parse(&body).unwrap();
        let names = request.old_object.unwrap().finalizers;
        assert!(matches!(
            names[0],
            std::borrow::Cow::Borrowed("example.com/a")
        ));
        assert!(matches!(names[1], std::borrow::Cow::Borrowed("é")));
        assert!(matches!(&names[2], std::borrow::Cow::Owned(s) if s == "b\"c"));
    }
}
