//! Red-team pass 4, R4-1: a registered secret hidden in compressed bytes
//! (a PNG `zTXt` chunk, a git loose object, a gzip member) must not leave
//! as an artifact — neither through `view_file`, nor the collection of
//! `$CUBBY_OUTPUT_DIR`, nor `resources/read` — and a committed `deny_read`
//! file must not leave through `.git/objects`.
//!
//! Each test's oracle shows the payload is real (the bytes on disk inflate
//! to the secret, which the byte scan alone does not see) and that the same
//! action on the same kind of file without the secret still succeeds.

use std::io::Write as _;

use cubby::{Mode, Policy, Toolset, local_sandbox};

use crate::*;

/// The secret `Run::toolset` registers.
const SECRET: &[u8] = b"tok-5150-zyxw";

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn inflate(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(bytes), &mut out).unwrap();
    out
}

fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// `png` with a `zTXt` chunk (keyword `Comment`) holding `text`, before IEND.
fn with_ztxt(png: &[u8], text: &[u8]) -> Vec<u8> {
    let mut data = b"Comment\0\0".to_vec();
    data.extend(zlib(text));
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    let mut body = b"zTXt".to_vec();
    body.extend(&data);
    let mut crc = flate2::Crc::new();
    crc.update(&body);
    chunk.extend(&body);
    chunk.extend(crc.sum().to_be_bytes());
    let iend = png.len() - 12;
    let mut out = png[..iend].to_vec();
    out.extend(chunk);
    out.extend(&png[iend..]);
    out
}

#[test]
fn view_file_publishes_the_pixels_it_showed_not_a_secret_in_a_ztxt_chunk() {
    let r = Run::new();
    let file = with_ztxt(&png(4, 3), SECRET);
    // The payload is real: the file decodes, holds the secret compressed,
    // and the byte scan does not see it.
    assert!(image::load_from_memory(&file).is_ok());
    assert!(!holds(&file, SECRET));
    let at = file.windows(4).position(|w| w == b"zTXt").unwrap();
    assert!(holds(&inflate(&file[at + 4 + 9..file.len() - 16]), SECRET));
    r.put("pic.png", &file);
    let t = r.toolset();
    let out = ok(&t, "view_file", json!({"path": "pic.png"}));
    let files = out.artifacts();
    assert_eq!(files.len(), 1, "{}", out.text);
    let f = files[0].clone();
    let (_, served) = t.read_artifact(&f.uri, 25_000_000).unwrap();
    // What leaves is what the model was shown: the re-encoded pixels.
    assert_eq!(served, out.images()[0].bytes, "{}", out.text);
    assert!(!holds(&served, b"zTXt"), "the file's metadata left");
    assert_ne!(f.sha256, sha256_hex(&file));
    assert_eq!(f.path, None, "its bytes are not the file's");
    let shown = image::load_from_memory(&served).unwrap().to_rgb8();
    assert_eq!(shown, image::load_from_memory(&file).unwrap().to_rgb8());
    // A GIF shown as PNG is named as what it is.
    let mut gif = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(2, 2, image::Rgb([1, 2, 3]))
        .write_to(&mut gif, image::ImageFormat::Gif)
        .unwrap();
    r.put("anim.gif", gif.get_ref());
    let out = ok(&t, "view_file", json!({"path": "anim.gif"}));
    assert_eq!(out.artifacts()[0].name, "anim.png", "{}", out.text);
    assert_eq!(out.artifacts()[0].media_type, "image/png");
}

#[test]
fn a_binary_holding_a_compressed_secret_is_not_published_nor_served() {
    let r = Run::new();
    r.put(
        "data.bin",
        &zlib(&[b"header\0".as_slice(), SECRET].concat()),
    );
    r.put("plain.bin", &zlib(b"header\0nothing to hide"));
    let t = r.toolset();
    // The oracle: the same kind of file without the secret is published.
    let out = ok(&t, "view_file", json!({"path": "plain.bin"}));
    assert_eq!(out.artifacts().len(), 1, "{}", out.text);
    let out = ok(&t, "view_file", json!({"path": "data.bin"}));
    assert!(out.artifacts().is_empty(), "{}", out.text);
    assert!(
        out.text
            .contains("denied: `data.bin` holds a secret's value in compressed data"),
        "{}",
        out.text
    );
    // From $CUBBY_OUTPUT_DIR: a gzip member and a copy of the object.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&[b"log line: ".as_slice(), SECRET].concat())
        .unwrap();
    r.put("logs.gz", &gz.finish().unwrap());
    let out = ok(
        &t,
        "run",
        json!({"command": "cp logs.gz data.bin \"$CUBBY_OUTPUT_DIR\"/ && cp plain.bin \"$CUBBY_OUTPUT_DIR\"/clean.bin"}),
    );
    let names: Vec<_> = out.artifacts().iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, ["clean.bin"], "{}", out.text);
    assert!(out.text.contains("/logs.gz: denied: "), "{}", out.text);
    assert!(out.text.contains("/data.bin: denied: "), "{}", out.text);
    // resources/read checks the same (an artifact a library published
    // without the check).
    let published = t
        .artifacts()
        .publish_bytes(
            &cubby::artifact::Publish {
                name: "lib.bin".into(),
                ..Default::default()
            },
            &zlib(SECRET),
        )
        .unwrap();
    let e = t
        .read_artifact(&published.file.uri, 25_000_000)
        .unwrap_err();
    assert_eq!(e.kind(), cubby::ErrorKind::Denied, "{e}");
    let clean = t
        .artifacts()
        .publish_bytes(
            &cubby::artifact::Publish {
                name: "lib2.bin".into(),
                ..Default::default()
            },
            &zlib(b"nothing"),
        )
        .unwrap();
    assert!(t.read_artifact(&clean.file.uri, 25_000_000).is_ok());
}

#[test]
fn a_committed_deny_read_file_does_not_leave_through_git_objects() {
    let r = Run::new();
    r.put(".env", b"API=hunter2-but-longer\n");
    r.put("README", b"hi\n");
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&r.root)
            .output()
            .unwrap();
        assert!(s.status.success(), "{s:?}");
        String::from_utf8(s.stdout).unwrap()
    };
    git(&["init", "-q"]);
    git(&["add", ".env", "README"]);
    git(&["commit", "-q", "-m", "one"]);
    let id = git(&["hash-object", ".env"]).trim().to_string();
    let object = format!(".git/objects/{}/{}", &id[..2], &id[2..]);
    // The payload is real: the object holds the file, compressed.
    let on_disk = std::fs::read(r.root.join(&object)).unwrap();
    assert!(holds(&inflate(&on_disk), b"API=hunter2-but-longer"));
    // read-only mode, `.env` denied, and no secret registered: the file
    // tools alone.
    let policy = Policy::builder()
        .mode(Mode::ReadOnly)
        .deny_read([".env"])
        .build()
        .unwrap();
    let t = Toolset::builder(local_sandbox(&r.root).unwrap())
        .policy(policy)
        .track_changes(false)
        .artifact_store(r.store.clone())
        .build()
        .unwrap();
    assert!(t.call("read_file", json!({"path": ".env"})).is_error);
    for path in [object.as_str(), ".git/index"] {
        let out = ok(&t, "view_file", json!({"path": path}));
        assert!(out.artifacts().is_empty(), "{path}: {}", out.text);
        assert!(
            out.text.contains("is inside a git directory"),
            "{path}: {}",
            out.text
        );
    }
    assert!(t.artifacts().list().is_empty());
    // The oracle: a binary outside `.git` is published by the same call.
    r.put("copy.bin", &on_disk);
    let out = ok(&t, "view_file", json!({"path": "copy.bin"}));
    assert_eq!(out.artifacts().len(), 1, "{}", out.text);
}
