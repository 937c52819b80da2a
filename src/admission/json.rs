//! JSON written straight into a buffer: the answer and the audit record are
//! a few known fields, so each string is escaped once, where it lands.

use std::fmt::Write as _;

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    contents(out, s);
    out.push('"');
}

/// Appends `s` escaped, without quotes: a part of a JSON string.
pub fn contents(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut at = clean_prefix(bytes);
    while at < bytes.len() {
        let b = bytes[at];
        // Escapes are ASCII, so `at` is a character boundary.
        out.push_str(&s[start..at]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        start = at + 1;
        at = start + clean_prefix(&bytes[start..]);
    }
    out.push_str(&s[start..]);
}

/// How many leading bytes need no escape: eight at a time while none of
/// them is a control character, a quote or a backslash.
fn clean_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Bytes of `w` that are zero, or below `n`, have their high bit set in the result
    // (exact for the first such byte, which is all that is looked for here).
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGHS;
    let mut at = 0;
    for chunk in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        if below(w, 0x20) | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')))
            != 0
        {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .unwrap_or(bytes.len() - at)
}

/// Appends `"key":` (keys are ours: nothing to escape).
pub fn key(out: &mut String, key: &str) {
    out.push('"');
    out.push_str(key);
    out.push_str("\":");
}

/// Appends `,"key":"value"`.
pub fn field(out: &mut String, name: &str, value: &str) {
    out.push(',');
    key(out, name);
    string(out, value);
}

/// Checks that no object in the JSON document `bytes` names a key twice.
///
/// The offline tools read recordings and case files into a
/// `serde_json::Value`, which keeps one copy of a duplicated key; the
/// webhook refuses a duplicated key that its decision reads. A file that
/// repeats a key anywhere is refused before it is read that way, so `test`
/// never judges a review the webhook would refuse. A key is compared as
/// decoded, so an escaped spelling of the same name is the same key.
pub fn distinct_keys(bytes: &[u8]) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::Deserialize::deserialize(&mut de).map(|Distinct| ())?;
    de.end()
}

/// Any JSON value, refused when one of its objects repeats a key.
struct Distinct;

impl<'de> serde::Deserialize<'de> for Distinct {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DistinctVisitor)
    }
}

struct DistinctVisitor;

impl<'de> serde::de::Visitor<'de> for DistinctVisitor {
    type Value = Distinct;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_str<E>(self, _: &str) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_unit<E>(self) -> Result<Distinct, E> {
        Ok(Distinct)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Distinct, A::Error> {
        while seq.next_element::<Distinct>()?.is_some() {}
        Ok(Distinct)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Distinct, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !seen.insert(key.to_string()) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {:?}",
                    key.as_ref()
                )));
            }
            map.next_value::<Distinct>()?;
        }
        Ok(Distinct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_repeated_anywhere_is_refused() {
        assert!(distinct_keys(br#"{"a":[{"b":1,"c":{"d":null}}],"e":""}"#).is_ok());
        for doc in [
            r#"{"a":1,"a":2}"#,
            r#"{"r":{"o":{"m":{"an":{"k":"v","k":null}}}}}"#,
            r#"[{"x":1},{"y":{"k":1,"\u006b":2}}]"#,
        ] {
            let e = distinct_keys(doc.as_bytes()).expect_err(doc).to_string();
            assert!(e.contains("duplicate key"), "{doc}: {e}");
        }
        assert!(distinct_keys(b"{} {}").is_err(), "trailing data");
    }

    #[test]
    fn escapes_as_serde_json_does() {
        for s in [
            "",
            "plain",
            "quote \" backslash \\ slash /",
            "lines\nand\ttabs\r",
            "\u{0}\u{1}\u{8}\u{c}\u{1f}\u{7f}",
            "unicode é 漢字 \u{2028} 🦀",
            "eight by eight: 01234567\"89abcdef\\x",
            "a long one with nothing to escape in it, past several words",
            "\u{80}\u{ff}\u{100}ÿ\x7f\x1f after the high bytes",
        ] {
            let mut out = String::new();
            string(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
