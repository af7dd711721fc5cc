//! Writes the images `view_images.sh` views into the directory given: the
//! largest each format may be under view_file's 256 MiB decoding budget, a
//! few over it, and a ~20 MB noise PNG within the 1,568 px edge limit.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

/// A PNG of `w`×`h` black pixels, written row by row.
fn black_png(path: &Path, w: u32, h: u32, color: png::ColorType, depth: png::BitDepth) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut encoder = png::Encoder::new(file, w, h);
    encoder.set_color(color);
    encoder.set_depth(depth);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().unwrap();
    let channels = match color {
        png::ColorType::Rgba => 4,
        _ => 3,
    };
    let bytes = if depth == png::BitDepth::Sixteen {
        2
    } else {
        1
    };
    let row = vec![0u8; w as usize * channels * bytes];
    let mut stream = writer.stream_writer().unwrap();
    for _ in 0..h {
        stream.write_all(&row).unwrap();
    }
    stream.finish().unwrap();
    writer.finish().unwrap();
}

/// A GIF of one `edge`-square frame of four colours in stripes.
fn striped_gif(path: &Path, edge: u16) {
    let n = usize::from(edge);
    let indices: Vec<u8> = (0..n * n).map(|i| ((i / n + i % n) % 4) as u8).collect();
    let mut out = Vec::new();
    {
        let palette = [0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255];
        let mut encoder = gif::Encoder::new(&mut out, edge, edge, &palette).unwrap();
        let mut frame = gif::Frame::default();
        frame.width = edge;
        frame.height = edge;
        frame.buffer = Cow::Borrowed(&indices);
        encoder.write_frame(&frame).unwrap();
    }
    std::fs::write(path, out).unwrap();
}

fn gradient(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x ^ y) % 256) as u8])
    })
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: view-images-bench DIR");
    let dir = Path::new(&dir);
    use png::{BitDepth::*, ColorType::*};
    black_png(&dir.join("png_rgba8_8000.png"), 8000, 8000, Rgba, Eight);
    black_png(&dir.join("png_rgba16_5790.png"), 5790, 5790, Rgba, Sixteen);
    black_png(&dir.join("png_rgba16_5800.png"), 5800, 5800, Rgba, Sixteen);
    striped_gif(&dir.join("gif_7300.gif"), 7300);
    striped_gif(&dir.join("gif_8000.gif"), 8000);
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 50)
        .encode_image(&gradient(8000, 8000))
        .unwrap();
    std::fs::write(dir.join("jpeg_baseline_8000.jpg"), jpeg).unwrap();
    let img = gradient(6100, 6100);
    let mut webp = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
        .encode(img.as_raw(), 6100, 6100, image::ExtendedColorType::Rgb8)
        .unwrap();
    std::fs::write(dir.join("webp_lossless_6100.webp"), webp).unwrap();
    // ~20 MB of 16-bit RGBA noise, 1,568 px square.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let samples: Vec<u16> = (0..1568usize * 1568 * 4)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 16) as u16
        })
        .collect();
    let noise = image::ImageBuffer::<image::Rgba<u16>, _>::from_raw(1568, 1568, samples).unwrap();
    noise.save(dir.join("noise_1568.png")).unwrap();
}
