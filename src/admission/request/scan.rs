//! Scanning: a string borrowed from the body ([`Text`]), and a list of
//! names (`metadata.finalizers`, `userInfo.groups`) read in one piece, its
//! names taken between their quotes; only a list that is not plain strings
//! is read again the general way, for the reason serde gives.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::policy::MAX_LIST_NAMES;

/// The reason a list longer than [`MAX_LIST_NAMES`] is refused.
fn too_many_names() -> String {
    format!("more than {MAX_LIST_NAMES} names: too many to judge")
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
pub(super) fn names<'de: 'a, 'a, D: Deserializer<'de>>(
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
pub(super) struct FinalizerNames<'a> {
    pub(super) names: Vec<Cow<'a, str>>,
    pub(super) too_many: bool,
}

/// [`names`] for a finalizer list: past [`MAX_LIST_NAMES`] names, none
/// held and the list marked.
pub(super) fn finalizer_names<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<FinalizerNames<'a>, D::Error> {
    let Some(raw) = Option::<&'de RawValue>::deserialize(deserializer)? else {
        return Ok(FinalizerNames::default());
    };
    match read_names(raw.get()) {
        Ok(names) => Ok(FinalizerNames {
            names,
            too_many: false,
        }),
        Err(e) if e.ends_with(&too_many_names()) => Ok(FinalizerNames {
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
    let mut names = QuoteScan {
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
struct QuoteScan<'t, 'o> {
    text: &'t str,
    out: &'o mut Vec<Cow<'t, str>>,
    /// Where the string being read opened.
    opening: Option<usize>,
    /// Just after the last string closed (or the list opened).
    after: usize,
    first: bool,
}

impl<'t> QuoteScan<'t, '_> {
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
    struct NameListVisitor<'c>(&'c Cell<usize>);
    impl<'de> Visitor<'de> for NameListVisitor<'_> {
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
    de.deserialize_seq(NameListVisitor(&item))
        .map_err(|e| match item.get() {
            usize::MAX => without_position(&e),
            n => format!("item {n}: {}", without_position(&e)),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::admission::{ReviewBuilder, ReviewError, parse};

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
