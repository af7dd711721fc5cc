//! `view_file`: images as image content, downscaled; text as `read_file`.
//!
//! The media type is sniffed from the bytes, never taken from the name.
//! PNG, JPEG, GIF and WebP come back as an image whose long edge is at most
//! [`MAX_IMAGE_EDGE_PX`] (a larger one is decoded, resized and re-encoded:
//! JPEG stays JPEG, the others become PNG); other text files are shown as
//! `read_file` shows them; other binaries as metadata.

use image::{ImageFormat, imageops::FilterType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::read::{ReadFile, looks_binary};
use super::{Ctx, READ_ONLY, Shown, Tool, hex, sha256, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ImageData;
use crate::path::WorkspacePath;

/// Largest file `view_file` opens.
pub const MAX_VIEW_BYTES: u64 = 25 * 1024 * 1024;
/// Longest edge of an image shown, in pixels.
pub const MAX_IMAGE_EDGE_PX: u32 = 1568;

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
    /// The `read_file` result (text files).
    pub text: Option<super::read::Output>,
    #[serde(skip)]
    #[schemars(skip)]
    image: Option<ImageData>,
}

/// The `view_file` tool.
pub struct ViewFile;

fn format_of(media_type: &str) -> Option<ImageFormat> {
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

/// Decodes, downscales when needed, re-encodes. Returns (image, original
/// size, shown size).
fn shown_image(
    bytes: &[u8],
    format: ImageFormat,
    media_type: &str,
) -> Result<(ImageData, Dims, Dims)> {
    let img = image::load_from_memory_with_format(bytes, format).map_err(|e| {
        Error::new(
            ErrorKind::Binary,
            format!("the file looks like {media_type} but cannot be decoded: {e}"),
        )
    })?;
    let (w, h) = (img.width(), img.height());
    if w.max(h) <= MAX_IMAGE_EDGE_PX {
        let data = ImageData {
            media_type: media_type.to_string(),
            bytes: bytes.to_vec(),
        };
        return Ok((data, (w, h), (w, h)));
    }
    let scale = f64::from(MAX_IMAGE_EDGE_PX) / f64::from(w.max(h));
    let nw = ((f64::from(w) * scale).round() as u32).clamp(1, MAX_IMAGE_EDGE_PX);
    let nh = ((f64::from(h) * scale).round() as u32).clamp(1, MAX_IMAGE_EDGE_PX);
    let small = img.resize_exact(nw, nh, FilterType::Triangle);
    let (out_format, out_type) = match format {
        ImageFormat::Jpeg => (ImageFormat::Jpeg, "image/jpeg"),
        _ => (ImageFormat::Png, "image/png"),
    };
    let mut encoded = std::io::Cursor::new(Vec::new());
    let small = if out_format == ImageFormat::Jpeg {
        image::DynamicImage::ImageRgb8(small.to_rgb8())
    } else {
        small
    };
    small
        .write_to(&mut encoded, out_format)
        .map_err(|e| Error::internal(format!("cannot re-encode the image: {e}")))?;
    let data = ImageData {
        media_type: out_type.to_string(),
        bytes: encoded.into_inner(),
    };
    Ok((data, (w, h), (nw, nh)))
}

impl Tool for ViewFile {
    const NAME: &'static str = "view_file";
    const DESCRIPTION: &'static str = "View a file: images (PNG, JPEG, GIF, WebP) come back as \
        an image (downscaled to at most 1568 px on the long edge); text files as read_file shows \
        them; other files as metadata. The type is sniffed from the bytes. Limit 25 MB.";
    const ANNOTATIONS: super::Annotations = READ_ONLY;
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<(String, Output)> {
        let path = WorkspacePath::parse(&params.path)?;
        ctx.policy.check_read(&path)?;
        let meta = ctx.fs.metadata(&path)?;
        if meta.size > MAX_VIEW_BYTES {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "`{path}` is {} bytes, the view_file limit is {}; use read_file with an offset",
                    thousands(meta.size),
                    thousands(MAX_VIEW_BYTES)
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
            text: None,
            image: None,
        };
        if let Some(format) = format_of(&sniffed) {
            let (image, (w, h), (sw, sh)) = shown_image(&bytes, format, &sniffed)?;
            let text = if (w, h) == (sw, sh) {
                format!(
                    "`{path}`: {sniffed}, {w}×{h} px, {} bytes.",
                    thousands(out.size)
                )
            } else {
                format!(
                    "`{path}`: {sniffed}, {w}×{h} px, {} bytes; shown downscaled to {sw}×{sh} px.",
                    thousands(out.size)
                )
            };
            out.kind = "image".into();
            out.width = Some(w);
            out.height = Some(h);
            out.shown_width = Some(sw);
            out.shown_height = Some(sh);
            out.image = Some(image);
            return Ok((text, out));
        }
        if !looks_binary(head) {
            let (text, read) = ReadFile::call(
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
            return Ok((text, out));
        }
        let text = format!(
            "`{path}` is a binary file ({sniffed}, {} bytes, sha256 {}); it cannot be shown.",
            thousands(out.size),
            out.sha256
        );
        Ok((text, out))
    }

    fn take_images(output: &mut Output) -> Vec<ImageData> {
        output.image.take().into_iter().collect()
    }
}
