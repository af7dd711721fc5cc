//! `view_file`: images as image content, bounded; text as `read_file`.
//!
//! The media type is sniffed from the bytes, never taken from the name.
//! PNG, JPEG, GIF and WebP come back as an image the model's API accepts:
//!
//! - the dimensions are read from the header first, and an image over
//!   [`MAX_DECODE_EDGE_PX`] on either edge is refused before any pixel is
//!   decoded;
//! - decoding is bounded by `image::Limits` ([`MAX_DECODE_ALLOC_BYTES`]),
//!   and the pixel buffer plus the scratch a decoder keeps beside it (which
//!   the limits do not see: [`Header::scratch_per_px`]) are reserved
//!   against that budget before decoding starts;
//! - the image sent is always re-encoded from the decoded pixels (JPEG
//!   stays JPEG, the others become PNG): the file's bytes never leave, so
//!   neither does its metadata (PNG text chunks, JPEG comments, EXIF, XMP,
//!   ICC profiles, GIF comment and application extensions, WebP `EXIF` and
//!   `XMP ` chunks) nor anything a decoder skips — a secret in a compressed
//!   `zTXt` chunk is invisible to the redactor's byte scan;
//! - the image sent has a long edge of at most [`MAX_IMAGE_EDGE_PX`] and at
//!   most [`MAX_IMAGE_BYTES`] encoded bytes: a larger one is downscaled,
//!   and one that still does not fit becomes a JPEG of decreasing quality,
//!   then smaller;
//! - of an animated GIF, WebP or PNG only the first frame is sent.
//!
//! The result text says what was done: the original type, size and
//! dimensions, and those of the image sent. Other text files are shown as
//! `read_file` shows them; other binaries as metadata.

use std::io::Cursor;

use image::codecs::gif::GifDecoder;
use image::codecs::jpeg::{JpegDecoder, JpegEncoder};
use image::codecs::png::{CompressionType, PngDecoder, PngEncoder};
use image::codecs::webp::WebPDecoder;
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::read::{ReadFile, looks_binary};
use super::{Ctx, READ_ONLY, Shown, Tool, hex, sha256, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::output::{Attachment, ImageData};
use crate::path::WorkspacePath;

/// Largest file `view_file` opens.
pub const MAX_VIEW_BYTES: u64 = 25 * 1024 * 1024;
/// Longest edge of an image shown, in pixels.
pub const MAX_IMAGE_EDGE_PX: u32 = 1568;
/// Largest image sent, in encoded bytes. Anthropic's API takes images of up
/// to 5 MB of base64 text; 3,750,000 bytes are 5,000,000 base64 characters.
/// It also keeps a result far below rmcp's 16 MiB message cap.
pub const MAX_IMAGE_BYTES: usize = 3_750_000;
/// Longest edge, in pixels, of an image `view_file` decodes at all (both
/// edges are bounded): larger ones are refused from their header.
pub const MAX_DECODE_EDGE_PX: u32 = 8_000;
/// Most bytes decoding one image may take: its pixel buffer and the
/// decoder's scratch (`image::Limits::max_alloc`).
pub const MAX_DECODE_ALLOC_BYTES: u64 = 256 * 1024 * 1024;
/// JPEG qualities tried, best first, for an image that does not fit
/// [`MAX_IMAGE_BYTES`] in its own format.
const JPEG_QUALITIES: [u8; 4] = [85, 70, 55, 40];
/// JPEG quality of an image shrunk below its shown size to fit
/// [`MAX_IMAGE_BYTES`].
const SHRUNK_JPEG_QUALITY: u8 = 70;
/// Each shrinking step scales both edges by `SHRINK_NUM / SHRINK_DEN`.
const SHRINK_NUM: u32 = 3;
/// See [`SHRINK_NUM`].
const SHRINK_DEN: u32 = 4;
/// Shrinking stops at this long edge; a JPEG this small always fits
/// [`MAX_IMAGE_BYTES`] (at most 64 × 64 × 3 bytes before compression).
const MIN_SHRINK_EDGE_PX: u32 = 64;
/// Scratch zune-jpeg keeps beside the pixels of a JPEG of several scans
/// (progressive, or components in separate scans), per pixel: every
/// coefficient until the last scan, 2 bytes for each of up to 4
/// components. A JPEG of one scan is decoded a row of blocks at a time.
const MULTI_SCAN_JPEG_SCRATCH_BYTES_PER_PX: u64 = 8;
/// Scratch the gif crate keeps beside the pixels, per pixel: the frame's
/// palette indices, decoded before they are expanded to RGBA.
const GIF_SCRATCH_BYTES_PER_PX: u64 = 1;
/// Scratch image-webp keeps beside the pixels, per pixel: a lossless image
/// without alpha is decoded as RGBA and then copied.
const WEBP_SCRATCH_BYTES_PER_PX: u64 = 4;
/// Scratch of an animated WebP's first frame: the frame's own RGBA buffer
/// beside the decoder's.
const ANIMATED_WEBP_SCRATCH_BYTES_PER_PX: u64 = 8;

/// Arguments of `view_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// File path relative to the workspace root: an image (PNG, JPEG, GIF, WebP) or a text file.
    pub path: String,
}

/// Result of `view_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The path viewed.
    pub path: String,
    /// Media type sniffed from the bytes.
    pub media_type: String,
    /// `image`, `text` or `binary`.
    pub kind: String,
    /// Size in bytes; of the redacted contents when `redacted`.
    pub size: u64,
    /// sha256 of the file, hex; of its redacted contents when `redacted`.
    pub sha256: String,
    /// True when secrets were redacted from the file: `sha256` and `size`
    /// are those of the contents as shown, not of the bytes on disk.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// Image width in pixels (images).
    pub width: Option<u32>,
    /// Image height in pixels (images).
    pub height: Option<u32>,
    /// Width of the image shown, after downscaling (images).
    pub shown_width: Option<u32>,
    /// Height of the image shown, after downscaling (images).
    pub shown_height: Option<u32>,
    /// Media type of the image shown (images): the file's own, or the
    /// format it was re-encoded to.
    pub shown_media_type: Option<String>,
    /// Encoded size in bytes of the image shown (images).
    pub shown_size: Option<u64>,
    /// True when the image is animated and only its first frame is shown
    /// (images).
    pub first_frame_only: Option<bool>,
    /// The `read_file` result (text files).
    pub text: Option<super::read::Output>,
    /// The file as an artifact (SPEC §5.1): published by this view when no
    /// tool had published it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact: Option<crate::artifact::FileRef>,
}

/// The `view_file` tool.
pub struct ViewFile;

pub(super) fn format_of(media_type: &str) -> Option<ImageFormat> {
    match media_type {
        "image/png" => Some(ImageFormat::Png),
        "image/jpeg" => Some(ImageFormat::Jpeg),
        "image/gif" => Some(ImageFormat::Gif),
        "image/webp" => Some(ImageFormat::WebP),
        _ => None,
    }
}

/// Width and height in pixels.
type Dims = (u32, u32);

/// The image sent and how it came from the file.
pub(super) struct ShownImage {
    pub(super) data: ImageData,
    /// The file's dimensions.
    original: Dims,
    /// The dimensions of the image sent.
    shown: Dims,
    /// Only the first frame of an animation is sent.
    first_frame_only: bool,
    /// What was done to the file's image, in the order it was done.
    steps: Vec<String>,
}

/// What the model is told to do with an image `view_file` cannot decode.
const SHRINK_HINT: &str = "make a smaller copy with a command, if you can run one (for example \
    `magick IN -resize 1568x1568 OUT.png`, or Python with Pillow), and view that";

/// A decoder over the file's header, nothing decoded yet.
struct Header<'a> {
    decoder: Box<dyn ImageDecoder + 'a>,
    animated: bool,
    /// Bytes per pixel the decoder allocates beside the pixel buffer, which
    /// `image::Limits` does not see (from the decoders' code, checked by
    /// measurement: docs/PERFORMANCE.md). A PNG decoder's rows are few, and
    /// a GIF frame smaller than the screen is reserved by `image` itself.
    scratch_per_px: u64,
}

/// Limits of the header read: the allocation budget only, so that the
/// dimensions can be read (and named in the refusal) before they are
/// checked.
fn header_limits() -> image::Limits {
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_DECODE_ALLOC_BYTES);
    limits
}

/// Limits of decoding: the pixel bound and the allocation budget.
fn decode_limits() -> image::Limits {
    let mut limits = header_limits();
    limits.max_image_width = Some(MAX_DECODE_EDGE_PX);
    limits.max_image_height = Some(MAX_DECODE_EDGE_PX);
    limits
}

/// Reads the header only: the format's own decoder is built over the bytes
/// and reads as far as the dimensions (the first frame's descriptor of a
/// GIF, the chunks before the image data of a PNG).
fn read_header(bytes: &[u8], format: ImageFormat) -> std::result::Result<Header<'_>, ImageError> {
    let cursor = Cursor::new(bytes);
    Ok(match format {
        ImageFormat::Png => {
            let decoder = PngDecoder::with_limits(cursor, header_limits())?;
            let animated = decoder.is_apng()?;
            Header {
                decoder: Box::new(decoder),
                animated,
                scratch_per_px: 0,
            }
        }
        ImageFormat::Jpeg => Header {
            decoder: Box::new(JpegDecoder::new(cursor)?),
            animated: false,
            scratch_per_px: if jpeg_has_several_scans(bytes) {
                MULTI_SCAN_JPEG_SCRATCH_BYTES_PER_PX
            } else {
                0
            },
        },
        ImageFormat::Gif => Header {
            decoder: Box::new(GifDecoder::new(cursor)?),
            animated: gif_has_two_frames(bytes),
            scratch_per_px: GIF_SCRATCH_BYTES_PER_PX,
        },
        _ => {
            let decoder = WebPDecoder::new(cursor)?;
            let animated = decoder.has_animation();
            Header {
                decoder: Box::new(decoder),
                animated,
                scratch_per_px: if animated {
                    ANIMATED_WEBP_SCRATCH_BYTES_PER_PX
                } else {
                    WEBP_SCRATCH_BYTES_PER_PX
                },
            }
        }
    })
}

/// True when a GIF holds a second frame. The frames' LZW data is skipped,
/// not decompressed, so this costs a pass over the bytes and no pixels.
fn gif_has_two_frames(bytes: &[u8]) -> bool {
    let mut options = gif::DecodeOptions::new();
    options.skip_frame_decoding(true);
    let Ok(mut decoder) = options.read_info(bytes) else {
        return false;
    };
    matches!(decoder.next_frame_info(), Ok(Some(_)))
        && matches!(decoder.next_frame_info(), Ok(Some(_)))
}

/// True unless the JPEG's first image is one scan: a progressive frame
/// (SOF2, SOF6, SOF10, SOF14), or a second start of scan before the end of
/// the image. The header segments (EXIF thumbnails included) are skipped by
/// their lengths; in the entropy-coded data a 0xFF byte is followed by 0x00
/// or a restart marker, so the next other marker is found by a scan.
/// Malformed input counts as several scans: the larger estimate.
fn jpeg_has_several_scans(bytes: &[u8]) -> bool {
    let mut at = 2;
    loop {
        while bytes.get(at) == Some(&0xff) && bytes.get(at + 1) == Some(&0xff) {
            at += 1;
        }
        let (Some(0xff), Some(&marker), Some(&hi), Some(&lo)) = (
            bytes.get(at),
            bytes.get(at + 1),
            bytes.get(at + 2),
            bytes.get(at + 3),
        ) else {
            return true;
        };
        if matches!(marker, 0xc2 | 0xc6 | 0xca | 0xce) {
            return true;
        }
        at += 2 + usize::from(u16::from_be_bytes([hi, lo]));
        if marker == 0xda {
            break;
        }
    }
    while let Some(found) = bytes.get(at..).and_then(|rest| memchr::memchr(0xff, rest)) {
        let ff = at + found;
        match bytes.get(ff + 1) {
            Some(0xda) => return true,
            Some(0xd9) | None => return false,
            _ => at = ff + 1,
        }
    }
    false
}

/// `w×h px` with thousands separators, for messages.
fn px((w, h): Dims) -> String {
    format!("{}×{} px", thousands(u64::from(w)), thousands(u64::from(h)))
}

/// `n` bytes in MiB, rounded up, for messages.
fn mib(n: u64) -> u64 {
    n.div_ceil(1024 * 1024)
}

/// Decodes the file's image (the first frame of an animation) within the
/// bounds: the dimensions from the header first, then the allocation
/// budget, then the pixels.
fn decode_bounded(
    path: &WorkspacePath,
    bytes: &[u8],
    format: ImageFormat,
    media_type: &str,
) -> Result<(DynamicImage, bool)> {
    let undecodable = |e: ImageError| match e {
        ImageError::Limits(e) => Error::new(
            ErrorKind::TooLarge,
            format!(
                "`{path}` ({media_type}) needs more memory to decode than view_file allows \
                 ({} MiB): {e}; {SHRINK_HINT}",
                mib(MAX_DECODE_ALLOC_BYTES)
            ),
        ),
        e => Error::new(
            ErrorKind::Binary,
            format!("the file looks like {media_type} but cannot be decoded: {e}"),
        ),
    };
    let Header {
        mut decoder,
        animated,
        scratch_per_px,
    } = read_header(bytes, format).map_err(undecodable)?;
    let (w, h) = decoder.dimensions();
    if w > MAX_DECODE_EDGE_PX || h > MAX_DECODE_EDGE_PX {
        return Err(Error::new(
            ErrorKind::TooLarge,
            format!(
                "`{path}` is {} ({media_type}); view_file decodes images of at most {}; \
                 {SHRINK_HINT}",
                px((w, h)),
                px((MAX_DECODE_EDGE_PX, MAX_DECODE_EDGE_PX)),
            ),
        ));
    }
    let pixels = decoder.total_bytes();
    let scratch = scratch_per_px
        .saturating_mul(u64::from(w))
        .saturating_mul(u64::from(h));
    let needed = pixels.saturating_add(scratch);
    let mut limits = decode_limits();
    if limits.reserve(needed).is_err() {
        return Err(Error::new(
            ErrorKind::TooLarge,
            format!(
                "`{path}` is {} ({media_type}) and needs {} MiB to decode; view_file \
                 decodes within {} MiB; {SHRINK_HINT}",
                px((w, h)),
                thousands(mib(needed)),
                mib(MAX_DECODE_ALLOC_BYTES)
            ),
        ));
    }
    // What is left of the budget bounds the decoder's own allocations.
    decoder.set_limits(limits).map_err(undecodable)?;
    let img = DynamicImage::from_decoder(decoder).map_err(undecodable)?;
    Ok((img, animated))
}

/// `(w, h)` scaled so that the long edge is `edge`, each at least 1 px.
fn fit(w: u32, h: u32, edge: u32) -> Dims {
    let scale = f64::from(edge) / f64::from(w.max(h));
    let nw = ((f64::from(w) * scale).round() as u32).clamp(1, edge);
    let nh = ((f64::from(h) * scale).round() as u32).clamp(1, edge);
    (nw, nh)
}

/// The image with 8-bit channels (what PNG and JPEG are sent with).
fn eight_bit(img: DynamicImage) -> DynamicImage {
    match img {
        DynamicImage::ImageLuma8(_)
        | DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageRgb8(_)
        | DynamicImage::ImageRgba8(_) => img,
        DynamicImage::ImageLuma16(_) => DynamicImage::ImageLuma8(img.to_luma8()),
        DynamicImage::ImageLumaA16(_) => DynamicImage::ImageLumaA8(img.to_luma_alpha8()),
        i if i.color().has_alpha() => DynamicImage::ImageRgba8(i.to_rgba8()),
        i => DynamicImage::ImageRgb8(i.to_rgb8()),
    }
}

/// The image without alpha, composited onto white (JPEG has no alpha).
fn flattened(img: &DynamicImage) -> DynamicImage {
    if !img.color().has_alpha() {
        return img.clone();
    }
    let blend = |c: u8, a: u8| -> u8 {
        let (c, a) = (u16::from(c), u16::from(a));
        ((c * a + 255 * (255 - a) + 127) / 255) as u8
    };
    if let DynamicImage::ImageLumaA8(la) = img {
        let out = image::GrayImage::from_fn(la.width(), la.height(), |x, y| {
            let p = la.get_pixel(x, y).0;
            image::Luma([blend(p[0], p[1])])
        });
        return DynamicImage::ImageLuma8(out);
    }
    let rgba = img.to_rgba8();
    let out = image::RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let p = rgba.get_pixel(x, y).0;
        image::Rgb([blend(p[0], p[3]), blend(p[1], p[3]), blend(p[2], p[3])])
    });
    DynamicImage::ImageRgb8(out)
}

/// `img` as a PNG at this compression (`Fast` is fdeflate: about ten times
/// quicker than `Default` on a screenshot, and larger).
fn encode_png(img: &DynamicImage, compression: CompressionType) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let encoder = PngEncoder::new_with_quality(
        &mut out,
        compression,
        image::codecs::png::FilterType::Adaptive,
    );
    img.write_with_encoder(encoder)
        .map_err(|e| Error::internal(format!("cannot re-encode the image as PNG: {e}")))?;
    Ok(out)
}

/// `img` (without alpha) as a JPEG of this quality.
fn encode_jpeg(img: &DynamicImage, quality: u8) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let encoder = JpegEncoder::new_with_quality(&mut out, quality);
    img.write_with_encoder(encoder)
        .map_err(|e| Error::internal(format!("cannot re-encode the image as JPEG: {e}")))?;
    Ok(out)
}

/// Encodes `img` (8-bit, at most [`MAX_IMAGE_EDGE_PX`] on the long edge)
/// within [`MAX_IMAGE_BYTES`]: in its natural format (JPEG at the best
/// quality tried for a JPEG, else PNG, compressed fast and then, if that
/// does not fit, harder), then as JPEG of decreasing quality,
/// then as a smaller JPEG. Returns the bytes, their media type and
/// dimensions, and the steps taken (how it was encoded, and why when the
/// limit forced it: `for_bytes` says the file's own bytes were over it).
fn encode_within(
    img: &DynamicImage,
    from_jpeg: bool,
    for_bytes: bool,
) -> Result<(Vec<u8>, &'static str, Dims, Vec<String>)> {
    let dims = (img.width(), img.height());
    let to_fit = format!(
        "to fit the {}-byte limit",
        thousands(MAX_IMAGE_BYTES as u64)
    );
    if !from_jpeg {
        for compression in [CompressionType::Fast, CompressionType::Default] {
            let png = encode_png(img, compression)?;
            if png.len() <= MAX_IMAGE_BYTES {
                let step = if for_bytes {
                    format!("re-encoded as PNG {to_fit}")
                } else {
                    "re-encoded as PNG".to_string()
                };
                return Ok((png, "image/png", dims, vec![step]));
            }
        }
    }
    let opaque = flattened(img);
    let mut steps = Vec::new();
    if img.color().has_alpha() {
        steps.push("transparency flattened onto white (JPEG has none)".to_string());
    }
    for quality in JPEG_QUALITIES {
        let jpeg = encode_jpeg(&opaque, quality)?;
        if jpeg.len() <= MAX_IMAGE_BYTES {
            let forced = for_bytes || !from_jpeg || quality != JPEG_QUALITIES[0];
            steps.push(if forced {
                format!("re-encoded as JPEG at quality {quality} {to_fit}")
            } else {
                format!("re-encoded as JPEG at quality {quality}")
            });
            return Ok((jpeg, "image/jpeg", dims, steps));
        }
    }
    let mut edge = dims.0.max(dims.1);
    while edge > MIN_SHRINK_EDGE_PX {
        edge = (edge * SHRINK_NUM / SHRINK_DEN).max(MIN_SHRINK_EDGE_PX);
        let (w, h) = fit(dims.0, dims.1, edge);
        let small = opaque.thumbnail_exact(w, h);
        let jpeg = encode_jpeg(&small, SHRUNK_JPEG_QUALITY)?;
        if jpeg.len() <= MAX_IMAGE_BYTES {
            steps.push(format!(
                "downscaled to {} and re-encoded as JPEG at quality \
                 {SHRUNK_JPEG_QUALITY} {to_fit}",
                px((w, h))
            ));
            return Ok((jpeg, "image/jpeg", (w, h), steps));
        }
    }
    Err(Error::internal(format!(
        "the image does not fit {} bytes even as a {MIN_SHRINK_EDGE_PX} px JPEG",
        thousands(MAX_IMAGE_BYTES as u64)
    )))
}

/// Decodes within the bounds and makes the image sent, always re-encoded
/// from the decoded pixels (downscaled first when too large): the file's
/// own bytes never leave, so nothing but pixels does — no text chunk,
/// comment, EXIF, XMP or ICC profile, and no byte a decoder skips, which
/// redaction could not see (a compressed `zTXt` chunk) or would pass over.
pub(super) fn shown_image(
    path: &WorkspacePath,
    bytes: &[u8],
    format: ImageFormat,
    media_type: &str,
) -> Result<ShownImage> {
    let (img, animated) = decode_bounded(path, bytes, format, media_type)?;
    let (w, h) = (img.width(), img.height());
    let too_wide = w.max(h) > MAX_IMAGE_EDGE_PX;
    let mut steps = Vec::new();
    if animated {
        steps.push("animated: only the first frame is shown".to_string());
    }
    let img = if too_wide {
        let (nw, nh) = fit(w, h, MAX_IMAGE_EDGE_PX);
        steps.push(format!(
            "downscaled to {} (at most {} px on the long edge)",
            px((nw, nh)),
            thousands(u64::from(MAX_IMAGE_EDGE_PX))
        ));
        // Area averaging: allocates only the smaller image.
        img.thumbnail_exact(nw, nh)
    } else {
        img
    };
    let img = eight_bit(img);
    let over_bytes = !too_wide && !animated && bytes.len() > MAX_IMAGE_BYTES;
    let (encoded, out_type, shown, more) =
        encode_within(&img, format == ImageFormat::Jpeg, over_bytes)?;
    steps.extend(more);
    Ok(ShownImage {
        data: ImageData {
            media_type: out_type.to_string(),
            bytes: encoded,
        },
        original: (w, h),
        shown,
        first_frame_only: animated,
        steps,
    })
}

/// The name of a viewed file (its last component).
fn file_name(path: &WorkspacePath) -> String {
    path.as_path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The image view_file showed as an artifact of the run: the re-encoded
/// pixels the model saw (no metadata chunk, no bytes after the image), never
/// the file's own bytes (red-team 4, R4-1: a PNG `zTXt` holding a secret
/// left through `resources/read`). Named as the file, with the extension of
/// what was shown when the format changed (`a.gif` shown as PNG is
/// `a.png`); no sandbox path, since those bytes are not there.
fn publish_shown(
    ctx: &Ctx<'_>,
    path: &WorkspacePath,
    shown: &ImageData,
) -> Result<crate::artifact::FileRef> {
    let name = file_name(path);
    if ctx.redactor.finds(name.as_bytes()) {
        return Err(Error::denied(
            "the file's name holds a secret's value, and artifacts leave unredacted",
        ));
    }
    let ext = if shown.media_type == "image/jpeg" {
        ["jpg", "jpeg"].as_slice()
    } else {
        ["png"].as_slice()
    };
    let name = match name.rsplit_once('.') {
        Some((_, e)) if ext.iter().any(|x| e.eq_ignore_ascii_case(x)) => name,
        Some((stem, _)) if !stem.is_empty() => format!("{stem}.{}", ext[0]),
        _ => format!("{name}.{}", ext[0]),
    };
    crate::artifact::inflate::refuse_secret(ctx.redactor, "the image shown", &shown.bytes)?;
    ctx.run
        .artifacts()
        .publish_bytes(
            &crate::artifact::Publish {
                name,
                media_type: Some(shown.media_type.clone()),
                path: None,
            },
            &shown.bytes,
        )
        .map(|p| p.file)
}

/// A viewed binary (not an image) as an artifact of the run, when nothing
/// secret can be seen in it: not in its name or bytes, nor in a compressed
/// stream it holds (`artifact::inflate`); and never a file of a git
/// directory, whose objects hold every committed file — a `deny_read` one
/// too (R4-1).
fn publish_viewed(
    ctx: &Ctx<'_>,
    path: &WorkspacePath,
    bytes: &[u8],
) -> Result<crate::artifact::FileRef> {
    if path
        .as_path()
        .components()
        .any(|c| c.as_os_str() == std::ffi::OsStr::new(".git"))
    {
        return Err(Error::denied(format!(
            "`{path}` is inside a git directory, whose files are not published (its objects \
             hold every committed file, deny_read ones too); publish a file of the workspace"
        )));
    }
    let name = file_name(path);
    if ctx.redactor.finds(name.as_bytes()) {
        return Err(Error::denied(
            "the file's name holds a secret's value, and artifacts leave unredacted",
        ));
    }
    crate::artifact::inflate::refuse_secret(ctx.redactor, &format!("`{path}`"), bytes)?;
    ctx.run
        .artifacts()
        .publish_bytes(
            &crate::artifact::Publish {
                name,
                media_type: None,
                path: Some(path.display()),
            },
            bytes,
        )
        .map(|p| p.file)
}

impl Tool for ViewFile {
    const NAME: &'static str = "view_file";
    const FACTS: super::ToolFacts = super::reads_files(super::Cost::Short);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "View a file of the sandboxed workspace: images (PNG, JPEG, GIF, WebP) come back as \
             an image you can see; use it to look at images in this workspace. Images are \
             re-encoded from their pixels (no metadata is sent), at most {MAX_IMAGE_EDGE_PX} px \
             on the long edge and {} (the first frame of an animation); images over \
             {MAX_DECODE_EDGE_PX} px on an edge are refused. Text files come back as {} shows them, other files as metadata. \
             The type is sniffed from the bytes. Files up to {}.{}",
            super::size(MAX_IMAGE_BYTES as u64),
            ReadFile::NAME,
            super::size(MAX_VIEW_BYTES),
            d.mention(ReadFile::NAME, |read| format!(
                " For text, {read} pages through long files."
            )),
        )
    }
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let path = WorkspacePath::parse(&params.path)?;
        ctx.policy.check_read(&path)?;
        let meta = ctx.fs.metadata(&path)?;
        if meta.size > MAX_VIEW_BYTES {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "`{path}` is {} bytes, the {} limit is {}; use {} with an offset",
                    thousands(meta.size),
                    Self::NAME,
                    thousands(MAX_VIEW_BYTES),
                    ReadFile::NAME,
                ),
            ));
        }
        let bytes = ctx.fs.read_to_vec(&path, MAX_VIEW_BYTES)?;
        let sha = sha256(&bytes);
        let shown = Shown::of(ctx.redactor, &bytes, sha);
        ctx.run.record_read(&path, sha, shown.size);
        let head = &bytes[..bytes.len().min(super::read::BINARY_SNIFF_BYTES)];
        let sniffed = super::read::media_type(head);
        let mut out = Output {
            path: path.display(),
            media_type: sniffed.clone(),
            kind: "binary".into(),
            size: shown.size,
            sha256: hex(&shown.sha),
            redacted: shown.redacted,
            width: None,
            height: None,
            shown_width: None,
            shown_height: None,
            shown_media_type: None,
            shown_size: None,
            first_frame_only: None,
            text: None,
            artifact: None,
        };
        // Images (as shown) and binaries become artifacts (a text file's
        // text is the result itself, as read_file gives it).
        let published = |file: Result<crate::artifact::FileRef>| match file {
            Ok(file) => (format!("\n{}", super::publish::line(&file)), Some(file)),
            Err(e) => (format!("\nnot published as an artifact: {e}"), None),
        };
        if let Some(format) = format_of(&sniffed) {
            let shown = shown_image(&path, &bytes, format, &sniffed)?;
            let (artifact_line, artifact) = published(publish_shown(ctx, &path, &shown.data));
            out.artifact.clone_from(&artifact);
            let link = artifact.map(Attachment::Artifact);
            let (w, h) = shown.original;
            let (sw, sh) = shown.shown;
            let mut text = format!(
                "`{path}`: {sniffed}, {}, {} bytes",
                px((w, h)),
                thousands(out.size)
            );
            text.push_str(&format!(
                "; shown as {}, {}, {} bytes: {}.",
                shown.data.media_type,
                px((sw, sh)),
                thousands(shown.data.bytes.len() as u64),
                shown.steps.join("; ")
            ));
            out.kind = "image".into();
            out.width = Some(w);
            out.height = Some(h);
            out.shown_width = Some(sw);
            out.shown_height = Some(sh);
            out.shown_media_type = Some(shown.data.media_type.clone());
            out.shown_size = Some(shown.data.bytes.len() as u64);
            out.first_frame_only = Some(shown.first_frame_only);
            text.push_str(&artifact_line);
            let mut result =
                ToolOutput::ok(text, out).with_attachment(Attachment::Image(shown.data));
            result.attachments.extend(link);
            return Ok(result);
        }
        if !looks_binary(head) {
            // Text: its text is the result (read_file's, redacted).
            let ToolOutput {
                text,
                structured: read,
                ..
            } = ReadFile::call(
                ctx,
                super::read::Params {
                    path: params.path,
                    offset: None,
                    limit: None,
                },
            )?;
            out.kind = "text".into();
            out.media_type = "text/plain".into();
            out.text = Some(read);
            return Ok(ToolOutput::ok(text, out));
        }
        let (artifact_line, artifact) = published(publish_viewed(ctx, &path, &bytes));
        out.artifact.clone_from(&artifact);
        let link = artifact.map(Attachment::Artifact);
        let mut text = format!(
            "`{path}` is a binary file ({sniffed}, {} bytes, sha256 {}); it cannot be shown.",
            thousands(out.size),
            out.sha256
        );
        text.push_str(&artifact_line);
        let mut result = ToolOutput::ok(text, out);
        result.attachments.extend(link);
        Ok(result)
    }
}
