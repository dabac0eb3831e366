//! Short text forms of an ID that sort like the number: fixed width, most significant digit
//! first, over alphabets in ASCII order, so byte-wise (`COLLATE "C"`) string order is numeric
//! order.
//!
//! - base62: `0-9A-Za-z`, 11 characters (62^11 > 2^63). Case matters.
//! - Crockford's base32: `0-9A-Z` without I, L, O and U, 13 characters (32^13 = 2^65). Parsing
//!   follows Crockford's rules: lower case is accepted, `I`/`i`/`L`/`l` read as 1 and `O`/`o` as
//!   0, and hyphens are ignored. `U` is not a symbol. An input may hold at most as many hyphens
//!   as digits (26 characters in all), so that no unbounded input maps to an ID.
//!
//! Parsing works on bytes, not on characters of some encoding: every symbol is ASCII, which every
//! server encoding shares, so a byte outside ASCII is an error in any database (LATIN1 and
//! SQL_ASCII included), named by its value.

use std::fmt;

pub const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
pub const BASE62_WIDTH: usize = 11;
pub const BASE32_WIDTH: usize = 13;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Base62,
    Base32,
}

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Base62 => "base62",
            Form::Base32 => "Crockford base32",
        }
    }

    pub fn width(self) -> usize {
        match self {
            Form::Base62 => BASE62_WIDTH,
            Form::Base32 => BASE32_WIDTH,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// IDs are never negative.
    Negative(i64),
    /// A character outside the alphabet; `position` counts characters from 1.
    BadChar {
        form: Form,
        ch: char,
        position: usize,
    },
    /// A byte outside ASCII (no symbol is), at `position` (every character before it is ASCII,
    /// so that is also its character position).
    NotAscii {
        form: Form,
        byte: u8,
        position: usize,
    },
    /// More bytes than a form with its separators can have (every symbol is one ASCII byte).
    TooLong { form: Form, len: usize },
    /// Not exactly `width` digits.
    Length { form: Form, digits: usize },
    /// The digits are valid but the value exceeds the largest bigint.
    TooLarge { form: Form },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The words of every other function for a negative ID.
            CodecError::Negative(v) => write!(f, "invalid snowflake ID {v}"),
            // A control character shown as PostgreSQL shows a byte, `\x01`, never in Rust's
            // escapes (BadChar holds ASCII only).
            CodecError::BadChar { form, ch, position } => {
                let shown = if ch.is_ascii_graphic() || *ch == ' ' {
                    ch.to_string()
                } else {
                    format!("\\x{:02X}", *ch as u32)
                };
                write!(
                    f,
                    "invalid character \"{shown}\" at position {position} of a {} snowflake ID",
                    form.name()
                )
            }
            CodecError::NotAscii {
                form,
                byte,
                position,
            } => write!(
                f,
                "invalid character (byte 0x{byte:02X}, not ASCII) at position {position} of a {} snowflake ID",
                form.name()
            ),
            CodecError::TooLong { form, len } => write!(
                f,
                "a {} snowflake ID has at most {} characters{}, not {len} bytes",
                form.name(),
                match form {
                    Form::Base62 => form.width(),
                    Form::Base32 => 2 * form.width(),
                },
                match form {
                    Form::Base62 => "",
                    Form::Base32 => " with its hyphens",
                }
            ),
            CodecError::Length { form, digits } => write!(
                f,
                "a {} snowflake ID has {} characters, not {digits}",
                form.name(),
                form.width()
            ),
            CodecError::TooLarge { form } => {
                write!(f, "{} value is out of range for type bigint", form.name())
            }
        }
    }
}

fn encode(id: i64, alphabet: &[u8], width: usize) -> Result<String, CodecError> {
    if id < 0 {
        return Err(CodecError::Negative(id));
    }
    let base = alphabet.len() as u64;
    let mut v = id as u64;
    let mut out = vec![alphabet[0]; width];
    for slot in out.iter_mut().rev() {
        *slot = alphabet[(v % base) as usize];
        v /= base;
    }
    debug_assert_eq!(v, 0);
    Ok(String::from_utf8(out).expect("ASCII"))
}

pub fn to_base62(id: i64) -> Result<String, CodecError> {
    encode(id, BASE62, BASE62_WIDTH)
}

pub fn to_base32(id: i64) -> Result<String, CodecError> {
    encode(id, CROCKFORD, BASE32_WIDTH)
}

fn base62_digit(c: char) -> Option<u64> {
    match c {
        '0'..='9' => Some(c as u64 - '0' as u64),
        'A'..='Z' => Some(c as u64 - 'A' as u64 + 10),
        'a'..='z' => Some(c as u64 - 'a' as u64 + 36),
        _ => None,
    }
}

fn crockford_digit(c: char) -> Option<u64> {
    let c = c.to_ascii_uppercase();
    let c = match c {
        'I' | 'L' => '1',
        'O' => '0',
        _ => c,
    };
    CROCKFORD
        .iter()
        .position(|&a| a as char == c)
        .map(|p| p as u64)
}

fn decode(
    text: &[u8],
    form: Form,
    digit: fn(char) -> Option<u64>,
    skip: fn(char) -> bool,
) -> Result<i64, CodecError> {
    let base: u64 = match form {
        Form::Base62 => 62,
        Form::Base32 => 32,
    };
    // Bounded before the bytes are looked at, so an input of any size costs the same: base32 may
    // hold as many hyphens as digits, and no more; a base62 input of more bytes than its
    // characters could take in any encoding (4 each) is refused at once, a shorter one is read
    // for the first byte that is wrong, which names it.
    let most = match form {
        Form::Base62 => 4 * form.width(),
        Form::Base32 => 2 * form.width(),
    };
    if text.len() > most {
        return Err(CodecError::TooLong {
            form,
            len: text.len(),
        });
    }
    let mut value: u128 = 0;
    let mut digits = 0;
    for (i, &b) in text.iter().enumerate() {
        if !b.is_ascii() {
            return Err(CodecError::NotAscii {
                form,
                byte: b,
                position: i + 1,
            });
        }
        let c = b as char;
        if skip(c) {
            continue;
        }
        let d = digit(c).ok_or(CodecError::BadChar {
            form,
            ch: c,
            position: i + 1,
        })?;
        digits += 1;
        if digits <= form.width() {
            value = value * base as u128 + d as u128;
        }
    }
    if digits != form.width() {
        return Err(CodecError::Length { form, digits });
    }
    i64::try_from(value).map_err(|_| CodecError::TooLarge { form })
}

/// The ID of a base62 form, from its bytes in any ASCII-compatible encoding.
pub fn from_base62(text: impl AsRef<[u8]>) -> Result<i64, CodecError> {
    decode(text.as_ref(), Form::Base62, base62_digit, |_| false)
}

/// The ID of a Crockford base32 form, from its bytes in any ASCII-compatible encoding.
pub fn from_base32(text: impl AsRef<[u8]>) -> Result<i64, CodecError> {
    decode(text.as_ref(), Form::Base32, crockford_digit, |c| c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_ends_of_the_range() {
        assert_eq!(to_base62(0).unwrap(), "00000000000");
        assert_eq!(to_base62(i64::MAX).unwrap(), "AzL8n0Y58m7");
        assert_eq!(to_base32(0).unwrap(), "0000000000000");
        assert_eq!(to_base32(i64::MAX).unwrap(), "7ZZZZZZZZZZZZ");
        assert_eq!(from_base62("AzL8n0Y58m7").unwrap(), i64::MAX);
        assert_eq!(from_base32("7ZZZZZZZZZZZZ").unwrap(), i64::MAX);
        assert_eq!(to_base32(910499571847892992).unwrap(), "0S8NYH5E27400");
        assert_eq!(to_base62(910499571847892992).unwrap(), "15G63YLn9Ae");
    }

    #[test]
    fn crockfords_case_rules() {
        let id = from_base32("0S8NYH5E27400").unwrap();
        assert_eq!(from_base32("0s8nyh5e27400").unwrap(), id);
        assert_eq!(from_base32("0s8n-yh5e-27400").unwrap(), id);
        assert_eq!(from_base32("0000000000001").unwrap(), 1);
        for one in [
            "000000000000I",
            "000000000000i",
            "000000000000L",
            "000000000000l",
        ] {
            assert_eq!(from_base32(one).unwrap(), 1, "{one}");
        }
        assert_eq!(from_base32("OOOOOOOOOOOOo").unwrap(), 0);
        assert_eq!(
            from_base32("00000000000U0").unwrap_err(),
            CodecError::BadChar {
                form: Form::Base32,
                ch: 'U',
                position: 12
            }
        );
    }

    #[test]
    fn bad_input_is_named() {
        assert_eq!(
            from_base62("0000000000-").unwrap_err(),
            CodecError::BadChar {
                form: Form::Base62,
                ch: '-',
                position: 11
            }
        );
        assert_eq!(
            from_base62("1").unwrap_err(),
            CodecError::Length {
                form: Form::Base62,
                digits: 1
            }
        );
        assert_eq!(
            from_base62("zzzzzzzzzzz").unwrap_err(),
            CodecError::TooLarge { form: Form::Base62 }
        );
        assert_eq!(
            from_base32("8000000000000").unwrap_err(),
            CodecError::TooLarge { form: Form::Base32 }
        );
        // 'é' in UTF-8 (0xC3 0xA9), and in LATIN1 (0xE9): named by its first byte.
        assert_eq!(
            from_base32("0é00000000000").unwrap_err().to_string(),
            "invalid character (byte 0xC3, not ASCII) at position 2 of a Crockford base32 snowflake ID"
        );
        assert_eq!(
            from_base62([b'0', 0xE9]).unwrap_err(),
            CodecError::NotAscii {
                form: Form::Base62,
                byte: 0xE9,
                position: 2
            }
        );
        // Hyphens are bounded: at most 26 characters in all.
        assert_eq!(from_base32("0-0-0-0-0-0-0-0-0-0-0-0-1").unwrap(), 1);
        assert_eq!(
            from_base32(format!("{}0000000000001", "-".repeat(14))).unwrap_err(),
            CodecError::TooLong {
                form: Form::Base32,
                len: 27
            }
        );
        assert_eq!(to_base62(-1).unwrap_err(), CodecError::Negative(-1));
        assert_eq!(
            to_base62(-1).unwrap_err().to_string(),
            "invalid snowflake ID -1"
        );
        // A control character as PostgreSQL shows a byte, not as Rust escapes it.
        assert_eq!(
            from_base62("\u{1}0000000000").unwrap_err().to_string(),
            "invalid character \"\\x01\" at position 1 of a base62 snowflake ID"
        );
        // Any size is refused by its length first, in bytes.
        let huge = vec![1u8; 10_000_000];
        assert_eq!(
            from_base62(&huge).unwrap_err().to_string(),
            "a base62 snowflake ID has at most 11 characters, not 10000000 bytes"
        );
        assert_eq!(
            from_base32(&huge).unwrap_err(),
            CodecError::TooLong {
                form: Form::Base32,
                len: 10_000_000
            }
        );
        assert_eq!(
            from_base62("").unwrap_err().to_string(),
            "a base62 snowflake ID has 11 characters, not 0"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
        #[test]
        fn round_trip_and_order(a in prop_oneof![0..=i64::MAX, Just(0i64), Just(i64::MAX), Just(1i64), Just(i64::MAX - 1)],
                                b in prop_oneof![0..=i64::MAX, Just(0i64), Just(i64::MAX)]) {
            for (enc, dec, width) in [
                (to_base62 as fn(i64) -> Result<String, CodecError>, (|t: &str| from_base62(t)) as fn(&str) -> Result<i64, CodecError>, 11),
                (to_base32, |t: &str| from_base32(t), 13),
            ] {
                let (sa, sb) = (enc(a).unwrap(), enc(b).unwrap());
                prop_assert_eq!(sa.len(), width);
                prop_assert_eq!(dec(&sa).unwrap(), a);
                prop_assert_eq!(sa.as_bytes().cmp(sb.as_bytes()), a.cmp(&b));
            }
        }

        #[test]
        fn neighbours_keep_their_order(a in 0..i64::MAX) {
            prop_assert!(to_base62(a).unwrap() < to_base62(a + 1).unwrap());
            prop_assert!(to_base32(a).unwrap() < to_base32(a + 1).unwrap());
        }
    }
}
