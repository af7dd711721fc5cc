//! Secrets inside compressed bytes (red-team pass 4, R4-1).
//!
//! An artifact leaves unredacted, so nothing holding a registered secret's
//! value may become one. A byte scan does not see a value that is
//! compressed: a PNG `zTXt` chunk, a git loose object (a committed
//! `deny_read` file), a gzip member, a zip entry. [`find_secret`] looks in
//! the bytes themselves and then in every compressed stream it can inflate:
//!
//! ```text
//! the bytes as they are
//! PNG           the IDAT chunks joined (one zlib stream split over chunks)
//! every offset  zlib header (CM 8, CINFO ≤ 7, FCHECK, no dictionary): git
//!               objects and pack entries, PNG zTXt/iTXt/iCCP, PDF streams
//!               gzip header (1f 8b 08, its optional fields skipped)
//!               zip local header (PK 03 04, method 8): raw deflate
//! ```
//!
//! Inflation is bounded: [`MAX_INFLATED_BYTES`] in all for one artifact and
//! [`MAX_STREAM_TRIES`] attempts. Past either the verdict is "cannot tell"
//! (a zip bomb, a file of nothing but stream headers) and the caller
//! refuses: what cannot be checked does not leave. Each inflated stream is
//! scanned in chunks with an overlap one byte short of the longest secret,
//! so nothing inflated is held whole. Without registered secrets nothing is
//! inflated.

use flate2::{Decompress, FlushDecompress, Status};

use crate::error::{Error, ErrorKind, Result};
use crate::output::Redactor;

/// The most bytes inflated while one artifact is checked (256 MiB; about a
/// second of CPU).
pub const MAX_INFLATED_BYTES: u64 = 256 * 1024 * 1024;

/// The most streams tried for one artifact (a random 25 MB file has about
/// 12,000 offsets that look like a zlib header).
pub const MAX_STREAM_TRIES: usize = 200_000;

/// Bytes inflated at a time.
const CHUNK_BYTES: usize = 64 * 1024;

/// The PNG signature.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Where a secret was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// In the bytes as they are.
    Plain,
    /// In a stream inflated from the bytes at this offset.
    Inflated(usize),
}

/// Looks for a registered secret's value in `bytes` and in the compressed
/// streams they hold; `None` when there is none.
///
/// # Errors
///
/// `limit` when the streams inflate past [`MAX_INFLATED_BYTES`] or more
/// than [`MAX_STREAM_TRIES`] would have to be tried: cubby cannot tell, and
/// the caller does not publish.
pub fn find_secret(redactor: &Redactor, bytes: &[u8]) -> Result<Option<Found>> {
    if redactor.is_empty() {
        return Ok(None);
    }
    if redactor.finds(bytes) {
        return Ok(Some(Found::Plain));
    }
    let mut scan = Scan {
        redactor,
        keep: redactor.longest().saturating_sub(1),
        left: MAX_INFLATED_BYTES,
        tries: 0,
        zlib: Decompress::new(true),
        raw: Decompress::new(false),
    };
    if let Some(idat) = png_idat(bytes)
        && scan.inflate(&idat, true)?
    {
        return Ok(Some(Found::Inflated(PNG_SIGNATURE.len())));
    }
    let mut at = 0;
    while at + 2 <= bytes.len() {
        let rest = &bytes[at..];
        let stream = if is_zlib_header(rest[0], rest[1]) {
            Some((0, true))
        } else if rest.starts_with(&[0x1f, 0x8b, 0x08]) {
            gzip_data(rest).map(|d| (d, false))
        } else if rest.starts_with(b"PK\x03\x04") {
            zip_deflate_data(rest).map(|d| (d, false))
        } else {
            None
        };
        let Some((start, zlib)) = stream else {
            at += 1;
            continue;
        };
        if scan.inflate(&rest[start..], zlib)? {
            return Ok(Some(Found::Inflated(at)));
        }
        // Never past a stream: one that inflated (a stored block, say) may
        // hold the bytes of another, which is tried at its own offset.
        at += 1;
    }
    Ok(None)
}

/// [`find_secret`] as the check of a publication: `denied` naming `what`
/// when a secret is found, `limit` when cubby cannot tell.
///
/// # Errors
///
/// As said.
pub fn refuse_secret(redactor: &Redactor, what: &str, bytes: &[u8]) -> Result<()> {
    match find_secret(redactor, bytes) {
        Ok(None) => Ok(()),
        Ok(Some(Found::Plain)) => Err(Error::denied(format!(
            "{what} holds a secret's value; artifacts leave unredacted, so it is not published \
             (write a copy without it)"
        ))),
        Ok(Some(Found::Inflated(at))) => Err(Error::denied(format!(
            "{what} holds a secret's value in compressed data (a stream at byte {at}); \
             artifacts leave unredacted, so it is not published (write a copy without it)"
        ))),
        Err(e) => Err(Error::new(
            ErrorKind::Limit,
            format!(
                "{what} is not published: {}; artifacts leave unredacted and this one cannot be \
                 checked for secrets (publish it uncompressed, or smaller)",
                e.message()
            ),
        )),
    }
}

struct Scan<'a> {
    redactor: &'a Redactor,
    /// Bytes kept from one chunk to the next.
    keep: usize,
    /// Bytes that may still be inflated.
    left: u64,
    tries: usize,
    zlib: Decompress,
    raw: Decompress,
}

impl Scan<'_> {
    /// Inflates the stream at the start of `input` (zlib or raw deflate),
    /// scanning what comes out: true when a secret is in it.
    fn inflate(&mut self, input: &[u8], zlib: bool) -> Result<bool> {
        self.tries += 1;
        if self.tries > MAX_STREAM_TRIES {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "it holds more than {MAX_STREAM_TRIES} places that look like compressed streams"
                ),
            ));
        }
        let d = if zlib { &mut self.zlib } else { &mut self.raw };
        d.reset(zlib);
        let mut window: Vec<u8> = Vec::with_capacity(self.keep + CHUNK_BYTES);
        loop {
            let (in_before, out_before) = (d.total_in(), d.total_out());
            window.reserve(CHUNK_BYTES);
            let consumed_so_far = usize::try_from(in_before).unwrap_or(usize::MAX);
            let status = d.decompress_vec(
                input.get(consumed_so_far..).unwrap_or_default(),
                &mut window,
                FlushDecompress::None,
            );
            let produced = d.total_out() - out_before;
            let took = d.total_in() - in_before;
            if produced > self.left {
                return Err(Error::new(
                    ErrorKind::Limit,
                    format!(
                        "its compressed streams inflate past {MAX_INFLATED_BYTES} bytes (a zip bomb?)"
                    ),
                ));
            }
            self.left -= produced;
            if produced > 0 && self.redactor.finds(&window) {
                return Ok(true);
            }
            match status {
                Ok(Status::Ok | Status::BufError) if produced > 0 || took > 0 => {
                    // Keep the tail a secret cut at the chunk's end needs.
                    let cut = window.len().saturating_sub(self.keep);
                    window.drain(..cut);
                }
                // The end, a truncated stream, or not deflate at all.
                _ => return Ok(false),
            }
        }
    }
}

/// True when `b0 b1` is a zlib header: deflate, a window of at most 32 KiB,
/// a valid check, no preset dictionary.
fn is_zlib_header(b0: u8, b1: u8) -> bool {
    b0 & 0x0f == 8
        && b0 >> 4 <= 7
        && b1 & 0x20 == 0
        && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0
}

/// Where the deflate data of the gzip member at the start of `b` begins.
fn gzip_data(b: &[u8]) -> Option<usize> {
    const FHCRC: u8 = 0x02;
    const FEXTRA: u8 = 0x04;
    const FNAME: u8 = 0x08;
    const FCOMMENT: u8 = 0x10;
    let flags = *b.get(3)?;
    let mut at = 10;
    if flags & FEXTRA != 0 {
        let len = usize::from(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]));
        at += 2 + len;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            at += memchr::memchr(0, b.get(at..)?)? + 1;
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    (at < b.len()).then_some(at)
}

/// Where the deflate data of the zip entry whose local header is at the
/// start of `b` begins, when the entry is deflated (method 8).
fn zip_deflate_data(b: &[u8]) -> Option<usize> {
    let u16_at = |i: usize| Some(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?]));
    if u16_at(8)? != 8 {
        return None;
    }
    let at = 30 + usize::from(u16_at(26)?) + usize::from(u16_at(28)?);
    (at < b.len()).then_some(at)
}

/// The data of a PNG's IDAT chunks joined, when `b` is a PNG.
fn png_idat(b: &[u8]) -> Option<Vec<u8>> {
    let mut rest = b.strip_prefix(PNG_SIGNATURE)?;
    let mut idat = Vec::new();
    while rest.len() >= 12 {
        let len = usize::try_from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]])).ok()?;
        let kind = &rest[4..8];
        let data = rest.get(8..8 + len)?;
        if kind == b"IDAT" {
            idat.extend_from_slice(data);
        }
        rest = rest.get(12 + len..)?;
    }
    (!idat.is_empty()).then_some(idat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn redactor() -> Redactor {
        Redactor::new(&[crate::output::Secret {
            name: "T".into(),
            value: "s3cr3tvalue42XYZ".into(),
        }])
        .unwrap()
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_git_object_a_gzip_member_and_a_zip_entry_are_looked_into() {
        let r = redactor();
        let object = zlib(b"blob 21\0API=s3cr3tvalue42XYZ\n");
        assert!(!r.finds(&object), "the byte scan alone sees it");
        assert_eq!(find_secret(&r, &object).unwrap(), Some(Found::Inflated(0)));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"....s3cr3tvalue42XYZ....").unwrap();
        let mut framed = b"junk before".to_vec();
        framed.extend(gz.finish().unwrap());
        assert_eq!(find_secret(&r, &framed).unwrap(), Some(Found::Inflated(11)));
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        raw.write_all(&b"s3cr3tvalue42XYZ".repeat(3)).unwrap();
        let raw = raw.finish().unwrap();
        let mut zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec();
        zip.extend([0u8; 16]);
        zip.extend(5u16.to_le_bytes());
        zip.extend(0u16.to_le_bytes());
        zip.extend(b"a.txt");
        zip.extend(&raw);
        assert_eq!(find_secret(&r, &zip).unwrap(), Some(Found::Inflated(0)));
        // The same streams without the secret pass.
        assert_eq!(find_secret(&r, &zlib(b"blob 5\0hello")).unwrap(), None);
    }

    #[test]
    fn a_secret_cut_between_two_chunks_is_found() {
        let r = redactor();
        let mut text = vec![b'a'; CHUNK_BYTES * 3 - 5];
        text.extend(b"s3cr3tvalue42XYZ");
        text.extend(vec![b'b'; 1000]);
        assert_eq!(
            find_secret(&r, &zlib(&text)).unwrap(),
            Some(Found::Inflated(0))
        );
    }

    #[test]
    fn a_bomb_and_a_file_of_headers_are_refused_not_passed() {
        let r = redactor();
        // 300 MiB of zeros deflate to about 300 kB.
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..300 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        let err = find_secret(&r, &bomb).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Limit);
        let headers = b"x\x9c".repeat(MAX_STREAM_TRIES + 1);
        assert_eq!(
            find_secret(&r, &headers).unwrap_err().kind(),
            ErrorKind::Limit
        );
        // Without secrets nothing is inflated.
        assert_eq!(find_secret(&Redactor::default(), &bomb).unwrap(), None);
    }
}
