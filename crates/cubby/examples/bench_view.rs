//! Timing of `view_file` on images small enough to be sent at their own
//! size (no downscaling), through the library.
//!
//! ```text
//! cargo run --release -p cubby --example bench_view -- [ITERATIONS]
//! ```
//!
//! Writes, into a temp dir: a 64 px PNG icon, a 1,200 × 800 PNG that looks
//! like a screenshot (flat panels, lines of "text"), an 800 × 600 and a
//! 1,500 × 1,000 JPEG that look like photos (smooth gradients with grain),
//! and a 320 × 240 GIF. Each is viewed ITERATIONS times, in interleaved
//! rounds; prints the median wall time of one call in milliseconds, the
//! file's size and the size of the image sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::io::Cursor;

use serde_json::json;
use support::{peak_rss_mib, time_rounds};

/// Deterministic noise (xorshift), one byte per call.
struct Grain(u64);

impl Grain {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
}

fn encode(img: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn icon() -> Vec<u8> {
    let img = image::RgbaImage::from_fn(64, 64, |x, y| {
        let inside = (x as i32 - 32).pow(2) + (y as i32 - 32).pow(2) < 28 * 28;
        if inside {
            image::Rgba([30, 120, 200, 255])
        } else {
            image::Rgba([0, 0, 0, 0])
        }
    });
    encode(
        &image::DynamicImage::ImageRgba8(img),
        image::ImageFormat::Png,
    )
}

fn screenshot() -> Vec<u8> {
    let mut grain = Grain(0x9e37_79b9_7f4a_7c15);
    let img = image::RgbImage::from_fn(1200, 800, |x, y| {
        if y < 40 {
            return image::Rgb([40, 44, 52]);
        }
        if x < 240 {
            return image::Rgb([33, 37, 43]);
        }
        // Lines of "text": short dark runs on a light background.
        let line = (y - 40) % 22;
        if (4..16).contains(&line) && grain.next() < 90 {
            image::Rgb([20, 20, 20])
        } else {
            image::Rgb([250, 250, 250])
        }
    });
    encode(
        &image::DynamicImage::ImageRgb8(img),
        image::ImageFormat::Png,
    )
}

fn photo(width: u32, height: u32) -> Vec<u8> {
    let mut grain = Grain(0x2545_f491_4f6c_dd1d);
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        let n = i32::from(grain.next() % 16) - 8;
        let c = |v: u32| (v as i32 + n).clamp(0, 255) as u8;
        image::Rgb([
            c(x * 255 / width),
            c(y * 255 / height),
            c((x + y) * 127 / (width + height)),
        ])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&img)
        .unwrap();
    out
}

fn gif() -> Vec<u8> {
    let img = image::RgbaImage::from_fn(320, 240, |x, y| {
        image::Rgba([(x / 40 * 30) as u8, (y / 30 * 30) as u8, 128, 255])
    });
    encode(
        &image::DynamicImage::ImageRgba8(img),
        image::ImageFormat::Gif,
    )
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let dir = std::env::temp_dir().join(format!("cubby-bench-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("icon.png", icon()),
        ("screenshot.png", screenshot()),
        ("photo-800.jpg", photo(800, 600)),
        ("photo-1500.jpg", photo(1500, 1000)),
        ("chart.gif", gif()),
    ];
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let tools = cubby::Toolset::builder(cubby::local_sandbox(&dir).unwrap())
        .track_changes(false)
        .build()
        .unwrap();
    let view = |name: &str| {
        let out = tools.call("view_file", json!({"path": name}));
        assert!(!out.is_error, "{}", out.text);
        out
    };
    for (name, _) in &files {
        view(name);
    }
    let mut calls: Vec<Box<dyn FnMut()>> = files
        .iter()
        .map(|(name, _)| {
            let name = *name;
            Box::new(move || {
                view(name);
            }) as Box<dyn FnMut()>
        })
        .collect();
    let mut refs: Vec<&mut dyn FnMut()> = calls.iter_mut().map(|f| &mut **f as _).collect();
    let medians = time_rounds(5, n, &mut refs);
    println!("view_file, {n} calls each in 5 interleaved rounds (median ms)");
    for ((name, bytes), ms) in files.iter().zip(medians) {
        let out = view(name);
        let sent = &out.images()[0];
        println!(
            "  {name:<16} {:>9} B on disk, sent {} {:>9} B   {ms:8.2} ms",
            bytes.len(),
            sent.media_type,
            sent.bytes.len()
        );
    }
    println!("peak RSS {:.1} MiB", peak_rss_mib());
    let _ = std::fs::remove_dir_all(&dir);
}
