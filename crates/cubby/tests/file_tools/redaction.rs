//! Redaction before every cut (SPEC §2), and digests that confirm no guess
//! of a secret.

use crate::*;

/// 32 characters, registered as a secret in the tests below.
pub const SECRET: &str = "sk-live-0123456789abcdefghijklmn";

pub fn with_secret(f: &dyn Fixture) -> Toolset {
    assert_eq!(SECRET.len(), 32);
    Toolset::builder(f.sandbox())
        .secret("API_KEY", SECRET)
        .build()
        .unwrap()
}

/// Asserts that no 6-character piece of the secret appears in the result.
pub fn no_part_of_secret(what: &str, out: &cubby::ToolOutput) {
    let both = format!("{}\n{}", out.text, out.structured);
    for i in 0..=SECRET.len() - 6 {
        let piece = &SECRET[i..i + 6];
        assert!(!both.contains(piece), "{what} shows `{piece}`: {both}");
    }
}

/// A line whose secret starts at `at` chars: a cut at `at + 31` would show
/// 31 of its 32 characters.
pub fn line_with_secret_at(at: usize) -> String {
    format!("NEEDLE {}{SECRET}{}", "a".repeat(at - 7), "b".repeat(100))
}

pub fn read_redacts_before_the_long_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(2000 - 31);
    f.put("long.txt", format!("{line}\nend\n").as_bytes());
    // Control: without the secret registered, the cut shows its prefix.
    let out = ok(&tools(f), "read_file", json!({"path": "long.txt"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    assert!(!out.text.contains(SECRET));
    let out = ok(&with_secret(f), "read_file", json!({"path": "long.txt"}));
    no_part_of_secret("read_file", &out);
    assert!(
        out.text.contains("[line cut at 2000 chars]"),
        "{}",
        out.text
    );
    assert!(out.text.contains("     2\tend"));
}

pub fn view_file_redacts_before_the_long_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(2000 - 31);
    f.put("long.txt", format!("{line}\n").as_bytes());
    let out = ok(&tools(f), "view_file", json!({"path": "long.txt"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    let out = ok(&with_secret(f), "view_file", json!({"path": "long.txt"}));
    no_part_of_secret("view_file", &out);
}

pub fn read_window_never_shows_part_of_a_multiline_secret(f: &dyn Fixture) {
    let pem = "-----BEGIN KEY-----\nMIIEsecretline1\nMIIEsecretline2\n-----END KEY-----";
    f.put("key.pem", format!("head\n{pem}\ntail\n").as_bytes());
    let t = Toolset::builder(f.sandbox())
        .secret("PEM", pem)
        .build()
        .unwrap();
    // A window starting inside the secret, and one ending inside it.
    for (offset, limit) in [(3, 10), (1, 3)] {
        let args = json!({"path": "key.pem", "offset": offset, "limit": limit});
        let bare = ok(&tools(f), "read_file", args.clone());
        assert!(bare.text.contains("MIIEsecretline"), "{}", bare.text);
        let out = ok(&t, "read_file", args);
        assert!(!out.text.contains("MIIE"), "{}", out.text);
        assert!(!out.structured.to_string().contains("MIIE"));
    }
    // Line numbers stay those of the file.
    let out = ok(&t, "read_file", json!({"path": "key.pem"}));
    assert!(
        out.text.contains("     2\t[REDACTED:PEM]\n"),
        "{}",
        out.text
    );
    assert!(out.text.contains("     6\ttail\n"), "{}", out.text);
    assert_eq!(out.structured["total_lines"], 6);
    // search sees the same redacted lines.
    let out = ok(&t, "search", json!({"query": "MIIE"}));
    assert_eq!(out.structured["total"], 0, "{}", out.text);
    let out = ok(&t, "search", json!({"query": "tail"}));
    assert!(out.text.starts_with("key.pem:6: tail"), "{}", out.text);
}

pub fn search_redacts_before_the_line_cut(f: &dyn Fixture) {
    let line = line_with_secret_at(500 - 31);
    f.put("long.txt", format!("{line}\n").as_bytes());
    let out = ok(&tools(f), "search", json!({"query": "NEEDLE"}));
    assert!(out.text.contains(&SECRET[..31]), "{}", out.text);
    let out = ok(&with_secret(f), "search", json!({"query": "NEEDLE"}));
    no_part_of_secret("search", &out);
    assert!(out.text.contains("[line cut at 500 chars]"), "{}", out.text);
}

pub fn echoed_input_is_redacted_before_its_cut(f: &dyn Fixture) {
    // `search` echoes its query, cut at 200 chars, when nothing matches.
    let query = format!("{}{SECRET}zz", "q".repeat(200 - 20));
    let out = ok(&tools(f), "search", json!({"query": query}));
    assert!(out.text.contains(&SECRET[..20]), "{}", out.text);
    let out = ok(&with_secret(f), "search", json!({"query": query}));
    no_part_of_secret("search's echo", &out);
    // A path echoed in an error, cut at 200 chars.
    let path = format!("../{}{SECRET}", "p".repeat(200 - 3 - 20));
    let msg = err(&tools(f), "read_file", json!({"path": path}), "path_escape");
    assert!(msg.contains(&SECRET[..20]), "{msg}");
    let out = with_secret(f).call("read_file", json!({"path": path}));
    assert!(out.text.starts_with("ERROR path_escape:"), "{}", out.text);
    no_part_of_secret("path_escape", &out);
}

/// Lower-case hex sha256.
pub fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The guesses an attacker hashes to confirm a secret offline: the file as
/// it was shown, each `[REDACTED:API_KEY]` put back as one candidate. The
/// last is the true secret.
pub fn guessed_files(shown: &str) -> Vec<String> {
    let mut guesses: Vec<String> = ["sk-live-guess", "hunter2"]
        .iter()
        .map(|g| g.to_string())
        .collect();
    guesses.push(SECRET.to_string());
    guesses
        .iter()
        .map(|g| shown.replace("[REDACTED:API_KEY]", g))
        .collect()
}

/// True when `out`'s `sha256` (or `size`) tells which guess is the file.
pub fn digest_confirms_a_guess(out: &Value, shown: &str) -> bool {
    let guesses = guessed_files(shown);
    guesses.iter().any(|g| out["sha256"] == sha_hex(g.as_bytes()))
        // The size of the file on disk tells the secret's length.
        || out["size"] == guesses.last().unwrap().len()
}

pub fn digests_of_redacted_files_confirm_no_guess(f: &dyn Fixture) {
    let raw = format!("# deploy\nAPI_KEY={SECRET}\n");
    f.put("key.env", raw.as_bytes());
    let mut binary = b"\x00\x01bin ".to_vec();
    binary.extend_from_slice(SECRET.as_bytes());
    f.put("blob.bin", &binary);
    let shown = "# deploy\nAPI_KEY=[REDACTED:API_KEY]\n";
    // Control: with no secret registered the contents are shown as they
    // are, and the same guessing confirms the file's bytes by their digest.
    let plain = ok(&tools(f), "read_file", json!({"path": "key.env"}));
    assert_eq!(plain.structured["content"], raw.as_str());
    assert!(digest_confirms_a_guess(&plain.structured, shown));
    assert_eq!(plain.structured["sha256"], sha_hex(raw.as_bytes()));

    let t = with_secret(f);
    let out = ok(&t, "read_file", json!({"path": "key.env"}));
    assert_eq!(out.structured["content"], shown, "{}", out.text);
    assert!(
        !digest_confirms_a_guess(&out.structured, shown),
        "{}",
        out.structured
    );
    // What is given is the digest of what was shown.
    assert_eq!(out.structured["sha256"], sha_hex(shown.as_bytes()));
    assert_eq!(out.structured["size"], shown.len());
    assert_eq!(out.structured["redacted"], true);
    let view = ok(&t, "view_file", json!({"path": "key.env"}));
    assert_eq!(view.structured["sha256"], sha_hex(shown.as_bytes()));
    assert_eq!(view.structured["redacted"], true);
    // A binary file too (its metadata only is shown).
    for tool in ["read_file", "view_file"] {
        let out = ok(&t, tool, json!({"path": "blob.bin"}));
        assert_ne!(out.structured["sha256"], sha_hex(&binary), "{tool}");
        assert_ne!(out.structured["size"], binary.len(), "{tool}");
        assert!(
            !out.text.contains(&sha_hex(&binary)),
            "{tool}: {}",
            out.text
        );
    }
    // The stale guard still works on the bytes on disk: an edit after the
    // read goes through, and its new digest tells no more.
    let out = ok(
        &t,
        "edit_file",
        json!({"path": "key.env", "find": "# deploy", "replace": "# deploy v2"}),
    );
    let shown2 = "# deploy v2\nAPI_KEY=[REDACTED:API_KEY]\n";
    assert!(
        !digest_confirms_a_guess(&out.structured, shown2),
        "{}",
        out.structured
    );
    assert_eq!(out.structured["sha256"], sha_hex(shown2.as_bytes()));
    assert_eq!(
        f.get("key.env").unwrap(),
        format!("# deploy v2\nAPI_KEY={SECRET}\n").as_bytes()
    );
    // Overwriting says how big the file was as it was shown, not on disk
    // (which would tell the secret's length).
    let raw2 = format!("# deploy v2\nAPI_KEY={SECRET}\n");
    let out = ok(
        &t,
        "write_file",
        json!({"path": "key.env", "content": raw2}),
    );
    assert!(
        out.text.contains(&format!("was {} bytes", shown2.len())),
        "{}",
        out.text
    );
    assert!(!out.text.contains(&format!("was {} bytes", raw2.len())));
    ok(&t, "read_file", json!({"path": "key.env"}));
    // Changed on disk after the read: stale.
    f.put("key.env", b"# deploy v2\nAPI_KEY=rotated\n");
    err(
        &t,
        "write_file",
        json!({"path": "key.env", "content": "x"}),
        "stale",
    );
}

/// An 8×8 PNG of `view::png`'s pixels carrying the secret in a `tEXt`
/// chunk, a compressed `zTXt` chunk and an `iTXt` chunk (`text`), or in the
/// `zTXt` chunk alone (`!text`: the file's bytes do not hold the value).
pub fn png_with_text(text: bool) -> Vec<u8> {
    let pixels = image::load_from_memory(&crate::view::png(8, 8))
        .unwrap()
        .to_rgb8();
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, 8, 8);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    if text {
        encoder
            .add_text_chunk("Comment".into(), SECRET.into())
            .unwrap();
        encoder
            .add_itxt_chunk("Description".into(), SECRET.into())
            .unwrap();
    }
    encoder
        .add_ztxt_chunk("Secret".into(), SECRET.repeat(4))
        .unwrap();
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(pixels.as_raw()).unwrap();
    writer.finish().unwrap();
    out
}

/// The text a PNG's metadata chunks hold, decoded (`zTXt` inflated).
pub fn png_texts(bytes: &[u8]) -> Vec<String> {
    let reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let info = reader.info();
    let mut texts: Vec<String> = info
        .uncompressed_latin1_text
        .iter()
        .map(|t| t.text.clone())
        .collect();
    for z in &info.compressed_latin1_text {
        texts.push(z.get_text().unwrap());
    }
    for i in &info.utf8_text {
        texts.push(i.get_text().unwrap());
    }
    texts
}

/// The kinds of a PNG's chunks, in order.
pub fn png_chunk_kinds(bytes: &[u8]) -> Vec<String> {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let mut at = 8;
    let mut kinds = Vec::new();
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        kinds.push(String::from_utf8_lossy(&bytes[at + 4..at + 8]).into_owned());
        at += 12 + len;
    }
    kinds
}

/// A JPEG segment: marker, big-endian length, data.
pub fn jpeg_segment(marker: u8, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0xff, marker];
    out.extend_from_slice(&(data.len() as u16 + 2).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A 16×16 JPEG with the secret in a comment (COM), an EXIF segment (APP1)
/// and an XMP packet (APP1), right after its start of image.
pub fn jpeg_with_metadata() -> Vec<u8> {
    let plain = crate::view::noise_jpeg(16, 16);
    let mut out = plain[..2].to_vec();
    out.extend(jpeg_segment(0xfe, format!("note: {SECRET}").as_bytes()));
    out.extend(jpeg_segment(0xe1, format!("Exif\0\0{SECRET}").as_bytes()));
    out.extend(jpeg_segment(
        0xe1,
        format!("http://ns.adobe.com/xap/1.0/\0<x:xmpmeta>{SECRET}</x:xmpmeta>").as_bytes(),
    ));
    out.extend_from_slice(&plain[2..]);
    out
}

/// The markers of a JPEG's segments before its first scan.
pub fn jpeg_markers(bytes: &[u8]) -> Vec<u8> {
    let mut at = 2;
    let mut markers = Vec::new();
    while at + 4 <= bytes.len() && bytes[at] == 0xff {
        let marker = bytes[at + 1];
        markers.push(marker);
        if marker == 0xda {
            break;
        }
        at += 2 + usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
    }
    markers
}

/// A GIF of 8×8 px with the secret in a comment extension and an
/// application extension, after its global colour table.
pub fn gif_with_metadata() -> Vec<u8> {
    let img = image::RgbaImage::from_fn(8, 8, |x, y| {
        image::Rgba([(x * 30) as u8, (y * 30) as u8, 9, 255])
    });
    let mut plain = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgba8(img)
        .write_to(&mut plain, image::ImageFormat::Gif)
        .unwrap();
    let plain = plain.into_inner();
    let flags = plain[10];
    let table = if flags & 0x80 != 0 {
        3 << ((flags & 7) + 1)
    } else {
        0
    };
    let at = 13 + table;
    let mut out = plain[..at].to_vec();
    out.extend_from_slice(&[0x21, 0xfe, SECRET.len() as u8]);
    out.extend_from_slice(SECRET.as_bytes());
    out.push(0);
    out.extend_from_slice(&[0x21, 0xff, 11]);
    out.extend_from_slice(b"CUBBYTST1.0");
    out.push(SECRET.len() as u8);
    out.extend_from_slice(SECRET.as_bytes());
    out.push(0);
    out.extend_from_slice(&plain[at..]);
    out
}

/// An 8×8 lossless WebP in the extended format with the secret in its
/// `EXIF` and `XMP ` chunks.
pub fn webp_with_metadata() -> Vec<u8> {
    let img = image::RgbaImage::from_fn(8, 8, |x, y| {
        image::Rgba([(x * 30) as u8, (y * 30) as u8, 9, 255])
    });
    let simple = crate::view::webp(&img);
    let mut body = b"WEBP".to_vec();
    let mut vp8x = vec![0x10 | 0x08 | 0x04, 0, 0, 0]; // alpha, EXIF, XMP
    vp8x.extend_from_slice(&crate::view::u24(7));
    vp8x.extend_from_slice(&crate::view::u24(7));
    crate::view::riff_chunk(&mut body, b"VP8X", &vp8x);
    body.extend_from_slice(crate::view::vp8l_chunk(&simple));
    crate::view::riff_chunk(&mut body, b"EXIF", format!("MM\0*{SECRET}").as_bytes());
    crate::view::riff_chunk(
        &mut body,
        b"XMP ",
        format!("<x:xmpmeta>{SECRET}</x:xmpmeta>").as_bytes(),
    );
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// SPEC §2: nothing redaction cannot see leaves. An image small enough to
/// be sent at its own size carries its metadata (PNG text chunks, JPEG
/// comments, EXIF and XMP, GIF extensions, WebP metadata chunks) — a
/// compressed `zTXt` chunk hides the secret from any byte scan. The image
/// sent holds pixels only: the same pixels, none of the metadata.
pub fn view_file_sends_no_image_metadata(f: &dyn Fixture) {
    let files: [(&str, Vec<u8>); 5] = [
        ("shots/text.png", png_with_text(true)),
        ("shots/ztxt.png", png_with_text(false)),
        ("shots/photo.jpg", jpeg_with_metadata()),
        ("shots/anim.gif", gif_with_metadata()),
        ("shots/meta.webp", webp_with_metadata()),
    ];
    for (path, bytes) in &files {
        f.put(path, bytes);
    }
    // Control: the files on disk hold the secret, in their bytes or (the
    // `zTXt` one) in a chunk any PNG reader inflates.
    let holds = |b: &[u8]| memchr::memmem::find(b, SECRET.as_bytes()).is_some();
    for (path, bytes) in &files {
        let on_disk = f.get(path).unwrap();
        assert_eq!(&on_disk, bytes);
        if *path == "shots/ztxt.png" {
            assert!(!holds(&on_disk), "the zTXt chunk is not compressed");
            assert_eq!(png_texts(&on_disk), vec![SECRET.repeat(4)]);
        } else {
            assert!(holds(&on_disk), "{path}: the control holds no secret");
        }
    }
    assert_eq!(png_texts(&files[0].1).len(), 3);
    assert!(jpeg_markers(&files[2].1).contains(&0xfe));
    let t = with_secret(f);
    for (path, bytes) in &files {
        let out = ok(&t, "view_file", json!({"path": path}));
        let sent = &out.images()[0].bytes;
        assert!(!holds(sent), "{path}: the image sent holds the secret");
        let ty = out.images()[0].media_type.clone();
        match ty.as_str() {
            "image/png" => {
                assert_eq!(png_texts(sent), Vec::<String>::new(), "{path}");
                for kind in png_chunk_kinds(sent) {
                    assert!(
                        ["IHDR", "PLTE", "tRNS", "IDAT", "IEND"].contains(&kind.as_str()),
                        "{path}: the image sent has a `{kind}` chunk"
                    );
                }
            }
            "image/jpeg" => {
                for marker in jpeg_markers(sent) {
                    assert!(
                        !(marker == 0xfe || (0xe1..=0xef).contains(&marker)),
                        "{path}: the image sent has marker {marker:#x}"
                    );
                }
            }
            other => panic!("{path}: sent as {other}"),
        }
        // The same picture.
        let want = image::load_from_memory(bytes).unwrap().to_rgba8();
        let got = image::load_from_memory(sent).unwrap().to_rgba8();
        assert_eq!(got.dimensions(), want.dimensions(), "{path}");
        if !path.ends_with(".jpg") {
            assert_eq!(got, want, "{path}: the pixels changed");
        }
        no_part_of_secret(path, &out);
    }
}

/// A secret spanning two lines (a key held in an environment variable).
pub const TWO_LINE_SECRET: &str = "BEGINxSECRETxLINE1\nLINE2xSECRETxEND";

/// R3-1: `edit_file` shows the file as `read_file` does. A secret spanning
/// lines was redacted from the diff only after its lines had been cut and
/// prefixed (` `, `-`, `+`), when the redactor could no longer see it whole,
/// and the `no_match` diagnostics quoted one raw line of it.
pub fn edit_file_never_shows_part_of_a_multiline_secret(f: &dyn Fixture) {
    let raw = format!("x\n{TWO_LINE_SECRET}\ny\n");
    let shows_part = |out: &cubby::ToolOutput| {
        let both = format!("{}\n{}", out.text, out.structured);
        both.contains("SECRETxLINE1") || both.contains("LINE2xSECRET")
    };
    let with = || {
        Toolset::builder(f.sandbox())
            .secret("ML", TWO_LINE_SECRET)
            .build()
            .unwrap()
    };
    // Control: with no secret registered, the same calls show the lines.
    for (t, secret) in [(tools(f), false), (with(), true)] {
        f.put("notes.txt", raw.as_bytes());
        let read = ok(&t, "read_file", json!({"path": "notes.txt"}));
        assert_eq!(shows_part(&read), !secret, "{}", read.text);
        if secret {
            // The oracle: read_file shows the marker, line numbers kept.
            assert!(
                read.text.contains("     2\t[REDACTED:ML]\n"),
                "{}",
                read.text
            );
            assert!(read.text.contains("     4\ty\n"), "{}", read.text);
        }
        // An edit next to the secret: its lines are diff context.
        let out = ok(
            &t,
            "edit_file",
            json!({"path": "notes.txt", "find": "x\n", "replace": "X\n"}),
        );
        assert_eq!(shows_part(&out), !secret, "{}", out.text);
        if secret {
            assert!(out.text.contains("\n [REDACTED:ML]\n"), "{}", out.text);
            assert!(out.text.contains("\n-x\n+X\n"), "{}", out.text);
        }
        // A `find` that is nearly a line of it (`no_match`'s most similar
        // line), or equal to one but for its indentation (`no_match`'s
        // whitespace step).
        for find in [
            "BEGINxSECRETxLINE9",
            "   BEGINxSECRETxLINE1",
            "\tLINE2xSECRETxEND",
        ] {
            let out = t.call(
                "edit_file",
                json!({"path": "notes.txt", "find": find, "replace": "z"}),
            );
            assert!(out.text.starts_with("ERROR no_match:"), "{}", out.text);
            assert_eq!(shows_part(&out), !secret, "{find:?}: {}", out.text);
        }
        assert_eq!(
            f.get("notes.txt").unwrap(),
            format!("X\n{TWO_LINE_SECRET}\ny\n").into_bytes()
        );
    }
}
