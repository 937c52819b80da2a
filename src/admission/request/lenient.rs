//! The lenient readers, for fields no decision reads (the identity a
//! recording keeps, the leak ledger): [`IfString`], [`IfObject`], [`IfList`],
//! [`StringMap`] and the string at a path of keys read any other shape as
//! absent, never as a failure.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::scan::Text;

/// A `metadata.deletionTimestamp` is set if its text is a timestamp.
pub(super) fn timestamp(text: &str) -> Result<jiff::Timestamp, jiff::Error> {
    text.parse()
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
pub(super) use scalars;

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
        struct IfStringVisitor;
        impl<'de> Visitor<'de> for IfStringVisitor {
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
        deserializer.deserialize_any(IfStringVisitor)
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
        struct IfObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for IfObjectVisitor<T> {
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
        deserializer.deserialize_any(IfObjectVisitor(PhantomData))
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
        struct IfListVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for IfListVisitor<T> {
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
        deserializer.deserialize_any(IfListVisitor(PhantomData))
    }
}

/// A map's string values (labels); a value of another shape reads as absent,
/// as an annotation's does.
#[derive(Default)]
pub(crate) struct StringMap(pub(crate) BTreeMap<String, String>);

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringMapVisitor;
        impl<'de> Visitor<'de> for StringMapVisitor {
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
        deserializer.deserialize_map(StringMapVisitor)
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
