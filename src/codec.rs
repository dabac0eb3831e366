//! The short text forms of [`crate::core::codec`] as SQL functions.

use crate::core::codec::{self, CodecError, Form};
use crate::errors;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// How much of a bad input a DETAIL quotes, in bytes: as PostgreSQL quotes a prefix of a bad
/// value, never all of it (an input of hundreds of megabytes, each byte escaped as four, once
/// overran the 1 GB allocation limit while the error was built, and took the server down).
const SHOWN_BYTES: usize = 32;

/// The start of the input as ASCII, whatever the database's encoding: other bytes as `\xNN`;
/// its length in bytes when it is longer.
fn shown(input: &[u8]) -> String {
    let head: String = input
        .iter()
        .take(SHOWN_BYTES)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                (b as char).to_string()
            } else {
                format!("\\x{b:02X}")
            }
        })
        .collect();
    if input.len() > SHOWN_BYTES {
        format!("{head}...\" ({} bytes)", input.len())
    } else {
        format!("{head}\"")
    }
}

fn check<T>(r: Result<T, CodecError>, input: &[u8]) -> T {
    let input = shown(input);
    r.unwrap_or_else(|e| {
        let (code, detail, hint) = match &e {
            // As every function of the extension does for a negative ID (see errors::layout).
            CodecError::Negative(_) => (
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                Some("Snowflake IDs are never negative: bit 63 is always 0.".into()),
                None,
            ),
            CodecError::NotAscii { form, .. } | CodecError::TooLong { form, .. } => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                Some(format!("The input was \"{input}.")),
                Some(match form {
                    Form::Base62 => "base62 uses 0-9, A-Z and a-z, and case matters.",
                    Form::Base32 => "Crockford base32 uses 0-9 and A-Z except I, L, O and U, in either case; I and L read as 1, O as 0, and hyphens (at most as many as digits) are ignored.",
                }),
            ),
            CodecError::BadChar { form: Form::Base62, .. } => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                Some(format!("The input was \"{input}.")),
                Some("base62 uses 0-9, A-Z and a-z, and case matters."),
            ),
            CodecError::BadChar { form: Form::Base32, .. } => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                Some(format!("The input was \"{input}.")),
                Some("Crockford base32 uses 0-9 and A-Z except I, L, O and U, in either case; I and L read as 1, O as 0, and hyphens are ignored."),
            ),
            CodecError::Length { .. } => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                Some(format!("The input was \"{input}.")),
                Some("The forms are fixed-width: keep the leading zeros."),
            ),
            CodecError::TooLarge { .. } => (
                PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                Some(format!("The input was \"{input}; the largest ID is 9223372036854775807.")),
                None,
            ),
        };
        errors::raise(code, e.to_string(), detail, hint)
    })
}

/// The ID as 11 base62 characters (0-9A-Za-z) that sort like the number under COLLATE "C".
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_to_base62(id: i64) -> String {
    check(codec::to_base62(id), id.to_string().as_bytes())
}

/// The text's bytes, not a `&str`: pgrx would refuse a non-UTF-8 string with a panic (XX000) in
/// a LATIN1 or SQL_ASCII database. Declared in SQL below, as `text`.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn snowflake_from_base62(encoded: &[u8]) -> i64 {
    check(codec::from_base62(encoded), encoded)
}

/// The ID as 13 characters of Crockford's base32 (upper case) that sort like the number.
#[pg_extern(immutable, strict, parallel_safe)]
fn snowflake_to_base32(id: i64) -> String {
    check(codec::to_base32(id), id.to_string().as_bytes())
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn snowflake_from_base32(encoded: &[u8]) -> i64 {
    check(codec::from_base32(encoded), encoded)
}

extension_sql!(
    r#"
CREATE FUNCTION "snowflake_from_base62"("encoded" TEXT) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_from_base62_wrapper';
CREATE FUNCTION "snowflake_from_base32"("encoded" TEXT) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_from_base32_wrapper';
COMMENT ON FUNCTION snowflake_to_base62(bigint) IS 'The ID as 11 base62 characters (0-9A-Za-z); byte order (COLLATE "C") is numeric order';
COMMENT ON FUNCTION snowflake_from_base62(text) IS 'The ID of an 11-character base62 form';
COMMENT ON FUNCTION snowflake_to_base32(bigint) IS 'The ID as 13 characters of Crockford''s base32; string order is numeric order';
COMMENT ON FUNCTION snowflake_from_base32(text) IS 'The ID of a 13-character Crockford base32 form (any case; I and L read as 1, O as 0; hyphens ignored)';
"#,
    name = "snowflake_codec_comments",
    requires = [snowflake_to_base62, snowflake_to_base32]
);
