//! `view_file`: images bounded (downscaled, re-encoded, refused before
//! decoding), text, binary, animations.

use crate::*;

pub fn png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 7])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

pub fn view_file_shows_images_downscaled(f: &dyn Fixture) {
    let small = png(40, 30);
    f.put("shots/small.bin", &small);
    f.put("shots/big.png", &png(3000, 1000));
    let t = tools(f);
    let out = ok(&t, "view_file", json!({"path": "shots/small.bin"}));
    assert_eq!(out.images().len(), 1);
    assert_eq!(out.images()[0].media_type, "image/png");
    // Re-encoded from its pixels (no metadata leaves): the same pixels.
    assert_eq!(
        image::load_from_memory(&out.images()[0].bytes)
            .unwrap()
            .to_rgb8(),
        image::load_from_memory(&small).unwrap().to_rgb8(),
    );
    assert!(out.text.contains("re-encoded as PNG"), "{}", out.text);
    assert_eq!(out.structured["kind"], "image");
    assert_eq!(
        (
            out.structured["width"].as_u64(),
            out.structured["height"].as_u64()
        ),
        (Some(40), Some(30))
    );
    let out = ok(&t, "view_file", json!({"path": "shots/big.png"}));
    assert_eq!(out.structured["shown_width"], 1568);
    assert_eq!(out.structured["shown_height"], 523);
    let shown = image::load_from_memory(&out.images()[0].bytes).unwrap();
    assert_eq!((shown.width(), shown.height()), (1568, 523));
    assert!(out.text.contains("downscaled"), "{}", out.text);
    // Viewing counts as reading for the write guard.
    ok(
        &t,
        "write_file",
        json!({"path": "shots/big.png", "content": "replaced"}),
    );
}

pub fn view_file_shows_text_and_binary(f: &dyn Fixture) {
    f.put("notes.md", b"# title\nbody\n");
    f.put("blob.dat", b"\0\x01\x02\x03");
    let t = tools(f);
    let out = ok(&t, "view_file", json!({"path": "notes.md"}));
    assert_eq!(out.text, "     1\t# title\n     2\tbody\n");
    assert_eq!(out.structured["kind"], "text");
    assert!(out.images().is_empty());
    let out = ok(&t, "view_file", json!({"path": "blob.dat"}));
    assert_eq!(out.structured["kind"], "binary");
    assert!(out.images().is_empty());
    let mut broken = png(10, 10);
    broken.truncate(40);
    f.put("broken.png", &broken);
    err(&t, "view_file", json!({"path": "broken.png"}), "binary");
    err(&t, "view_file", json!({"path": "missing.png"}), "not_found");
    err(&t, "view_file", json!({"path": "../x.png"}), "path_escape");
}

/// Largest image `view_file` sends, in encoded bytes (SPEC §5.1: 3.75 MB,
/// i.e. 5,000,000 characters of base64).
pub const MAX_IMAGE_BYTES: usize = 3_750_000;

/// Deterministic noise (xorshift): incompressible pixels.
pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A PNG of 16-bit RGBA noise: about 8 bytes a pixel on disk.
pub fn noise_png16(width: u32, height: u32) -> Vec<u8> {
    let raw = noise(width as usize * height as usize * 8, 0x9e37_79b9_7f4a_7c15);
    let samples: Vec<u16> = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let img = image::ImageBuffer::<image::Rgba<u16>, _>::from_raw(width, height, samples).unwrap();
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// A JPEG of RGB noise at quality 100: about 5 bytes a pixel.
pub fn noise_jpeg(width: u32, height: u32) -> Vec<u8> {
    let raw = noise(width as usize * height as usize * 3, 0x2545_f491_4f6c_dd1d);
    let img = image::RgbImage::from_raw(width, height, raw).unwrap();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 100)
        .encode_image(&img)
        .unwrap();
    out
}

/// Asserts that `view_file` sent one image within the limits, whose declared
/// media type is that of its bytes and whose dimensions are those reported.
pub fn assert_bounded_image(out: &cubby::ToolOutput) -> image::DynamicImage {
    assert_eq!(out.images().len(), 1, "{}", out.text);
    let sent = &out.images()[0];
    assert!(
        sent.bytes.len() <= MAX_IMAGE_BYTES,
        "{} bytes sent: {}",
        sent.bytes.len(),
        out.text
    );
    let format = image::guess_format(&sent.bytes).unwrap();
    assert_eq!(format.to_mime_type(), sent.media_type);
    assert_eq!(out.structured["shown_media_type"], sent.media_type.as_str());
    assert_eq!(out.structured["shown_size"], sent.bytes.len() as u64);
    let img = image::load_from_memory(&sent.bytes).unwrap();
    assert_eq!(
        (
            out.structured["shown_width"].as_u64(),
            out.structured["shown_height"].as_u64()
        ),
        (Some(u64::from(img.width())), Some(u64::from(img.height())))
    );
    img
}

pub fn view_file_reencodes_images_over_the_byte_limit(f: &dyn Fixture) {
    // Within the edge limit, but ~20 MB: 27 MB of base64 if sent as it is.
    let big = noise_png16(1568, 1568);
    assert!(big.len() > 19_000_000, "{}", big.len());
    f.put("shots/noise.png", &big);
    let photo = noise_jpeg(1500, 1000);
    assert!(photo.len() > MAX_IMAGE_BYTES, "{}", photo.len());
    f.put("shots/photo.jpg", &photo);
    let t = tools(f);
    let out = ok(&t, "view_file", json!({"path": "shots/noise.png"}));
    let img = assert_bounded_image(&out);
    assert_eq!(out.structured["media_type"], "image/png");
    assert_eq!(out.structured["size"], big.len() as u64);
    assert_eq!(
        (
            out.structured["width"].as_u64(),
            out.structured["height"].as_u64()
        ),
        (Some(1568), Some(1568))
    );
    assert_eq!(out.images()[0].media_type, "image/jpeg");
    assert!(img.width() <= 1568 && img.height() == img.width());
    // The text says what came in and what went out.
    let size = out.images()[0].bytes.len() as u64;
    for part in [
        "image/png, 1,568×1,568 px".to_string(),
        "shown as image/jpeg".to_string(),
        format!(
            "{}×{} px",
            thousands(img.width().into()),
            thousands(img.height().into())
        ),
        thousands(size),
        "3,750,000-byte limit".to_string(),
        "transparency flattened".to_string(),
    ] {
        assert!(out.text.contains(&part), "{part:?} not in {}", out.text);
    }
    let out = ok(&t, "view_file", json!({"path": "shots/photo.jpg"}));
    let img = assert_bounded_image(&out);
    assert_eq!(out.images()[0].media_type, "image/jpeg");
    assert!(img.width() <= 1500, "{}", out.text);
    assert!(out.text.contains("3,750,000-byte limit"), "{}", out.text);
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// CRC-32 of PNG chunks (ISO 3309), bit by bit.
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for &b in parts.iter().flat_map(|p| p.iter()) {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

pub fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// A PNG whose header says `width`×`height` (8-bit RGB) and whose data is
/// an empty zlib stream: a few dozen bytes, no pixels.
pub fn png_header_only(width: u32, height: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A GIF whose screen and one frame are `width`×`height`, with two bytes of
/// LZW data.
pub fn gif_header_only(width: u16, height: u16) -> Vec<u8> {
    let mut out = b"GIF89a".to_vec();
    out.extend_from_slice(&width.to_le_bytes());
    out.extend_from_slice(&height.to_le_bytes());
    out.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 255, 255, 255]);
    out.push(0x2c);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&width.to_le_bytes());
    out.extend_from_slice(&height.to_le_bytes());
    out.extend_from_slice(&[0, 2, 2, 0x4c, 0x01, 0, 0x3b]);
    out
}

/// A real 16×16 JPEG whose frame header is rewritten to `width`×`height`.
pub fn jpeg_header_only(width: u16, height: u16) -> Vec<u8> {
    let mut out = noise_jpeg(16, 16);
    let sof = out.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    out[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    out[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    out
}

pub fn view_file_budgets_a_progressive_jpegs_coefficients(f: &dyn Fixture) {
    // 5,000×5,000 px: 75,000,000 bytes of RGB. A progressive JPEG's decoder
    // also keeps every coefficient (up to 8 bytes a pixel): over 256 MiB.
    let baseline = jpeg_header_only(5_000, 5_000);
    let mut progressive = baseline.clone();
    let sof = progressive
        .windows(2)
        .position(|w| w == [0xff, 0xc0])
        .unwrap();
    progressive[sof + 1] = 0xc2;
    f.put("progressive.jpg", &progressive);
    f.put("baseline.jpg", &baseline);
    let t = tools(f);
    let msg = err(
        &t,
        "view_file",
        json!({"path": "progressive.jpg"}),
        "too_large",
    );
    for part in ["5,000×5,000 px", "within 256 MiB", "smaller copy"] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    // One scan is decoded a row of blocks at a time: within the budget, so
    // this header with 16×16 px of data is decoded, not refused for size.
    let out = t.call("view_file", json!({"path": "baseline.jpg"}));
    assert!(!out.text.starts_with("ERROR too_large"), "{}", out.text);
}

/// A lossless WebP image (RIFF container) of `img`.
pub fn webp(img: &image::RgbaImage) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut out)
        .encode(
            img.as_raw(),
            img.width(),
            img.height(),
            image::ExtendedColorType::Rgba8,
        )
        .unwrap();
    out
}

/// The VP8L chunk (header included) of a simple lossless WebP.
pub fn vp8l_chunk(webp: &[u8]) -> &[u8] {
    assert_eq!(&webp[12..16], b"VP8L");
    let len = u32::from_le_bytes(webp[16..20].try_into().unwrap()) as usize;
    &webp[12..20 + len + (len & 1)]
}

pub fn riff_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(kind);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    if data.len() % 2 == 1 {
        out.push(0);
    }
}

pub fn u24(n: u32) -> [u8; 3] {
    let b = n.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// An animated WebP on a `width`×`height` canvas whose frames are the
/// lossless `frames`, each at the top left.
pub fn animated_webp(width: u32, height: u32, frames: &[image::RgbaImage]) -> Vec<u8> {
    let mut body = b"WEBP".to_vec();
    let mut vp8x = vec![0x12, 0, 0, 0]; // animation and alpha
    vp8x.extend_from_slice(&u24(width - 1));
    vp8x.extend_from_slice(&u24(height - 1));
    riff_chunk(&mut body, b"VP8X", &vp8x);
    riff_chunk(&mut body, b"ANIM", &[255, 255, 255, 255, 0, 0]);
    for frame in frames {
        let mut anmf = vec![0; 6]; // x and y offsets (/2)
        anmf.extend_from_slice(&u24(frame.width() - 1));
        anmf.extend_from_slice(&u24(frame.height() - 1));
        anmf.extend_from_slice(&u24(100)); // duration, ms
        anmf.push(0b10); // no blending, no disposal
        anmf.extend_from_slice(vp8l_chunk(&webp(frame)));
        riff_chunk(&mut body, b"ANMF", &anmf);
    }
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

pub fn view_file_refuses_huge_headers_before_decoding(f: &dyn Fixture) {
    let frame = image::RgbaImage::from_pixel(4, 4, image::Rgba([1, 2, 3, 255]));
    let files: [(&str, Vec<u8>); 4] = [
        ("huge.png", png_header_only(60_000, 60_000)),
        ("huge.gif", gif_header_only(60_000, 60_000)),
        ("huge.jpg", jpeg_header_only(60_000, 60_000)),
        ("huge.webp", animated_webp(60_000, 60_000, &[frame])),
    ];
    for (name, bytes) in &files {
        assert!(bytes.len() < 4096, "{name} is {} bytes", bytes.len());
        f.put(name, bytes);
    }
    let t = tools(f);
    for (name, _) in &files {
        let msg = err(&t, "view_file", json!({"path": name}), "too_large");
        for part in ["60,000×60,000 px", "at most 8,000×8,000 px", "smaller copy"] {
            assert!(msg.contains(part), "{name}: {part:?} not in {msg}");
        }
    }
    // One edge over is enough.
    f.put("wide.png", &png_header_only(8_001, 10));
    let msg = err(&t, "view_file", json!({"path": "wide.png"}), "too_large");
    assert!(msg.contains("8,001×10 px"), "{msg}");
}

/// A valid PNG of `width`×`height` black 16-bit RGBA pixels, written row by
/// row: a few hundred KB on disk however many bytes it decodes to.
pub fn black_png16(width: u32, height: u32) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Sixteen);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().unwrap();
    let mut stream = writer.stream_writer().unwrap();
    let row = vec![0u8; width as usize * 8];
    for _ in 0..height {
        stream.write_all(&row).unwrap();
    }
    stream.finish().unwrap();
    writer.finish().unwrap();
    out
}

pub fn view_file_refuses_a_decode_bomb(f: &dyn Fixture) {
    // Within 8,000×8,000 px, but its pixels alone are 269,120,000 bytes,
    // over the 256 MiB decoding budget (and under image's default 512 MiB).
    let bomb = black_png16(5_800, 5_800);
    assert!(bomb.len() < 2_000_000, "{}", bomb.len());
    f.put("bomb.png", &bomb);
    let t = tools(f);
    let msg = err(&t, "view_file", json!({"path": "bomb.png"}), "too_large");
    for part in [
        "5,800×5,800 px",
        "257 MiB",
        "within 256 MiB",
        "smaller copy",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    // The server keeps serving: a small image next.
    f.put("small.png", &png(8, 8));
    ok(&t, "view_file", json!({"path": "small.png"}));
}

pub fn view_file_shows_the_first_frame_of_animations(f: &dyn Fixture) {
    let red = image::RgbaImage::from_pixel(6, 4, image::Rgba([255, 0, 0, 255]));
    let blue = image::RgbaImage::from_pixel(6, 4, image::Rgba([0, 0, 255, 255]));
    let mut gif = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new(&mut gif);
        encoder
            .encode_frames([
                image::Frame::new(red.clone()),
                image::Frame::new(blue.clone()),
            ])
            .unwrap();
    }
    f.put("anim.gif", &gif);
    f.put("anim.webp", &animated_webp(6, 4, &[red, blue]));
    let t = tools(f);
    for name in ["anim.gif", "anim.webp"] {
        let out = ok(&t, "view_file", json!({"path": name}));
        let img = assert_bounded_image(&out);
        assert_eq!(out.images()[0].media_type, "image/png", "{name}");
        assert_eq!(out.structured["first_frame_only"], true, "{name}");
        assert!(out.text.contains("only the first frame"), "{}", out.text);
        assert_eq!((img.width(), img.height()), (6, 4));
        let px = img.to_rgba8().get_pixel(3, 2).0;
        assert_eq!(px, [255, 0, 0, 255], "{name}: the first frame is red");
    }
    // A still GIF is sent as a PNG of its pixels (no GIF extension leaves).
    let mut still = Vec::new();
    image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
        3,
        3,
        image::Rgba([0, 255, 0, 255]),
    ))
    .write_to(
        &mut std::io::Cursor::new(&mut still),
        image::ImageFormat::Gif,
    )
    .unwrap();
    f.put("still.gif", &still);
    let out = ok(&t, "view_file", json!({"path": "still.gif"}));
    assert_eq!(out.images()[0].media_type, "image/png");
    assert_eq!(
        image::load_from_memory(&out.images()[0].bytes)
            .unwrap()
            .to_rgba8(),
        image::load_from_memory(&still).unwrap().to_rgba8()
    );
    assert_eq!(out.structured["first_frame_only"], false);
}
