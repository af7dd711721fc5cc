//! `$CUBBY_OUTPUT_DIR`, artifacts in `run` and `view_file` results, seeding
//! a run, secrets (on `local`: the collector reads through the confined
//! file system, as on every provider).

use cubby::Attachment;

use crate::*;

/// The FileRefs a `run` result carries (structured and attachments agree).
fn artifacts_of(out: &cubby::ToolOutput) -> Vec<cubby::artifact::FileRef> {
    let files: Vec<_> = out.artifacts().into_iter().cloned().collect();
    let structured: Vec<cubby::artifact::FileRef> = out
        .structured
        .get("artifacts")
        .map(|v| serde_json::from_value(v.clone()).unwrap())
        .unwrap_or_default();
    assert_eq!(files, structured, "{}", out.text);
    files
}

#[test]
fn a_file_left_in_the_output_dir_becomes_an_artifact_of_the_run() {
    let r = Run::new();
    let t = r.toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "test -d \"$CUBBY_OUTPUT_DIR\" && printf 'report\\n' > \"$CUBBY_OUTPUT_DIR/report.txt\" && echo \"dir=$CUBBY_OUTPUT_DIR\""}),
    );
    let files = artifacts_of(&out);
    assert_eq!(files.len(), 1, "{}", out.text);
    let f = &files[0];
    assert_eq!(f.name, "report.txt");
    assert_eq!(f.media_type, "text/plain");
    assert_eq!(f.sha256, sha256_hex(b"report\n"));
    assert_eq!(r.blob(&f.sha256), b"report\n");
    assert!(f.uri.starts_with("cubby://artifacts/"), "{}", f.uri);
    let path = f.path.as_deref().unwrap();
    assert!(path.starts_with(".cubby/output/"), "{path}");
    // The line the model reads.
    let line = format!(
        "artifact report.txt — text/plain, 7 B, sha256:{}…, {}, in the sandbox at {path}",
        &f.sha256[..12],
        f.uri
    );
    assert!(out.text.contains(&line), "{}", out.text);
    // The command saw the directory at its path in the sandbox.
    let shown = r.root.join(path).parent().unwrap().display().to_string();
    assert!(out.text.contains(&format!("dir={shown}")), "{}", out.text);
    // A second run of the same output publishes nothing new.
    let again = ok(&t, "run", json!({"command": "true"}));
    assert!(artifacts_of(&again).is_empty(), "{}", again.text);
    assert_eq!(t.artifacts().list(), files);
}

#[test]
fn links_fifos_and_a_sparse_terabyte_are_skipped_with_the_reason_and_nothing_hangs() {
    let r = Run::new();
    let t = r.toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && ln -s /etc/shadow shadow && mkfifo pipe \
            && truncate -s 1T huge.bin && touch -a -d @1000000000 huge.bin \
            && mkdir -p a/b/c/d && echo deep > a/b/c/d/e.txt && echo ok > a/ok.txt"}),
    );
    // Nothing hung (the call came back: the FIFO was never opened) and the
    // terabyte was refused by its size, unread — its access time, older
    // than its change, would have moved on a read (relatime) — whatever
    // the machine's load (this was a bound on the call's wall time).
    {
        use std::os::unix::fs::MetadataExt;
        let atimes: Vec<i64> = std::fs::read_dir(r.root.join(".cubby/output"))
            .unwrap()
            .flatten()
            .filter_map(|d| std::fs::metadata(d.path().join("huge.bin")).ok())
            .map(|m| m.atime())
            .collect();
        assert_eq!(atimes, [1_000_000_000], "huge.bin was read");
    }
    let text = &out.text;
    assert!(
        text.contains("skipped .cubby/output/")
            && text.contains("/shadow: a symbolic link (never followed)"),
        "{text}"
    );
    assert!(
        text.contains("/pipe: a FIFO, socket or device (never opened)"),
        "{text}"
    );
    assert!(text.contains("/huge.bin: limit: "), "{text}");
    assert!(text.contains("over the 25000000-byte limit"), "{text}");
    assert!(
        text.contains("/a/b/c/d: a directory deeper than 4 levels"),
        "{text}"
    );
    let files = artifacts_of(&out);
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["ok.txt"], "{text}");
    let skipped = out.structured["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 4, "{skipped:?}");
}

#[test]
fn ten_thousand_small_files_stop_at_the_run_limit_and_the_rest_are_counted() {
    let r = Run::new();
    let t = r.unhurried_toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && for d in 0 1 2 3 4 5 6 7 8 9; do mkdir $d; \
            for i in $(seq 1000); do echo \"$d-$i\" > $d/f$i.txt; done; done"}),
    );
    let files = artifacts_of(&out);
    assert_eq!(files.len(), 1000);
    assert_eq!(t.artifacts().usage().1, 1000);
    // Structured output is bounded as the text is (R4-5): the first 20,
    // then one line counting the rest.
    let skipped = out.structured["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 21, "{:?}", &skipped[..3]);
    assert!(
        skipped
            .iter()
            .all(|s| s.as_str().unwrap().contains(": limit: ")
                || s.as_str().unwrap().contains("(8980 of them for `limit`)")),
        "{:?}",
        skipped[0]
    );
    assert!(
        out.text
            .contains("skipped 8980 more file(s) (8980 of them for `limit`)"),
        "{}",
        &out.text[out.text.len() - 300..]
    );
    // The text stays bounded: a line per artifact, 20 skipped named.
    assert!(out.text.lines().count() < 1100);
}

#[test]
fn a_file_rewritten_during_collection_is_stored_as_it_was_read() {
    let r = Run::new();
    let t = r.toolset();
    // A writer that keeps rewriting one file (two sizes, two contents)
    // while runs collect the directory.
    ok(
        &t,
        "start_process",
        json!({"name": "rewriter", "command": "cd \"$CUBBY_OUTPUT_DIR\" && while :; do \
            head -c 300000 /dev/zero > churn.bin; head -c 700000 /dev/urandom > churn.bin; done"}),
    );
    let mut seen = 0;
    for _ in 0..20 {
        let out = t.call("run", json!({"command": "true"}));
        assert!(!out.is_error, "{}", out.text);
        for f in artifacts_of(&out) {
            // The digest names exactly the bytes stored.
            let bytes = r.blob(&f.sha256);
            assert_eq!(sha256_hex(&bytes), f.sha256);
            assert_eq!(bytes.len() as u64, f.size);
            seen += 1;
        }
    }
    t.stop_processes();
    assert!(seen > 0, "no version of the file was collected");
}

#[test]
fn view_file_publishes_what_no_tool_published_once() {
    let r = Run::new();
    r.put("shots/a.png", &png(40, 30));
    let t = r.toolset();
    let out = ok(&t, "view_file", json!({"path": "shots/a.png"}));
    let files = out.artifacts();
    assert_eq!(files.len(), 1, "{}", out.text);
    let f = files[0].clone();
    assert_eq!(f.name, "a.png");
    assert_eq!(f.media_type, "image/png");
    // The image shown, re-encoded: not the file's bytes, so no sandbox path.
    assert_eq!(f.path, None);
    assert_eq!(out.structured["artifact"]["uri"], f.uri);
    assert!(
        out.text.contains("artifact a.png — image/png, "),
        "{}",
        out.text
    );
    assert_eq!(out.images().len(), 1);
    let again = ok(&t, "view_file", json!({"path": "shots/a.png"}));
    assert_eq!(again.artifacts(), [&f]);
    assert_eq!(t.artifacts().list(), [f]);
}

#[test]
fn an_image_artifact_comes_with_its_image_and_an_svg_never_does() {
    let r = Run::new();
    let t = r.toolset();
    let png = png(3000, 1000);
    r.put("big.png", &png);
    r.put(
        "evil.svg",
        b"<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>",
    );
    let out = ok(
        &t,
        "run",
        json!({"command": "cp big.png evil.svg \"$CUBBY_OUTPUT_DIR\"/"}),
    );
    assert_eq!(artifacts_of(&out).len(), 2, "{}", out.text);
    let images = out.images();
    assert_eq!(images.len(), 1, "{}", out.text);
    let shown = image::load_from_memory(&images[0].bytes).unwrap();
    assert_eq!((shown.width(), shown.height()), (1568, 523));
    let svg = out
        .artifacts()
        .into_iter()
        .find(|f| f.name == "evil.svg")
        .unwrap();
    assert_eq!(svg.media_type, "image/svg+xml");
    // Order: each artifact's link, then its image.
    assert!(matches!(out.attachments[0], Attachment::Artifact(_)));
}

#[test]
fn a_file_holding_a_secret_is_not_published() {
    let r = Run::new();
    let t = r.toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "printf 'key=%s\\n' \"$CUBBY_TEST_TOKEN\" > \"$CUBBY_OUTPUT_DIR/leak.txt\""}),
    );
    assert!(artifacts_of(&out).is_empty(), "{}", out.text);
    assert!(out.text.contains("/leak.txt: denied: "), "{}", out.text);
    assert!(t.artifacts().list().is_empty());
    assert!(
        !r.state.join("artifacts/sha256").exists()
            || std::fs::read_dir(r.state.join("artifacts/sha256"))
                .unwrap()
                .count()
                == 0
    );
}

#[test]
fn a_new_run_is_seeded_with_earlier_artifacts() {
    let r = Run::new();
    let first = r.toolset();
    let out = ok(
        &first,
        "run",
        json!({"command": "printf 'v1\\n' > \"$CUBBY_OUTPUT_DIR/notes.md\""}),
    );
    let earlier = artifacts_of(&out);
    std::fs::remove_dir_all(r.root.join(".cubby")).unwrap();
    let second = r.toolset();
    assert!(second.artifacts().list().is_empty());
    let mut moved = earlier[0].clone();
    moved.path = None;
    moved.name = "copy.md".into();
    let seeded = second.seed(&[earlier[0].clone(), moved]).unwrap();
    assert_eq!(seeded[0].sha256, earlier[0].sha256);
    // Its path was the first run's output directory, removed with that
    // run: not made again (a run's output directory is its own), the file
    // is seeded in `.cubby/input` (found in review: seeding made the dead
    // directory again).
    let old_dir = r.root.join(earlier[0].path.as_deref().unwrap());
    assert!(
        earlier[0]
            .path
            .as_deref()
            .unwrap()
            .starts_with(".cubby/output/")
    );
    assert_eq!(seeded[0].path.as_deref(), Some(".cubby/input/notes.md"));
    assert!(
        !r.root.join(".cubby/output").exists(),
        "{old_dir:?} made again"
    );
    assert_eq!(
        std::fs::read(r.root.join(seeded[0].path.as_deref().unwrap())).unwrap(),
        b"v1\n"
    );
    assert_eq!(seeded[1].path.as_deref(), Some(".cubby/input/copy.md"));
    assert_eq!(
        std::fs::read(r.root.join(".cubby/input/copy.md")).unwrap(),
        b"v1\n"
    );
    assert_eq!(
        second.artifacts().resolve(&seeded[0].uri).unwrap(),
        seeded[0]
    );
    let out = ok(
        &second,
        "read_file",
        json!({"path": ".cubby/input/copy.md"}),
    );
    assert!(out.text.contains("v1"));
    // A digest the store does not hold.
    let mut bogus = earlier[0].clone();
    bogus.sha256 = "0".repeat(64);
    assert_eq!(
        second.seed(&[bogus]).unwrap_err().kind(),
        cubby::ErrorKind::NotFound
    );
}

#[test]
fn a_run_that_leaves_nothing_there_leaves_no_output_dir() {
    let r = Run::new();
    let t = r.toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "test -d \"$CUBBY_OUTPUT_DIR\" && echo there"}),
    );
    assert!(out.text.contains("there"), "{}", out.text);
    assert!(!r.root.join(".cubby").exists());
}

/// The command of `start_process` that leaves `late.txt` in the output
/// directory after the last `run` (written beside it, then renamed in:
/// whole when it appears), says so, then stays running.
const LEAVES_LATE: &str = "printf 'late bytes' > \"$CUBBY_OUTPUT_DIR/../late.tmp\" && \
     mv \"$CUBBY_OUTPUT_DIR/../late.tmp\" \"$CUBBY_OUTPUT_DIR/late.txt\" && echo LEFT-LATE && \
     exec sleep 600";

/// Starts [`LEAVES_LATE`] as process `late` of `t` and returns once it has
/// left its file: its own word on its output (a readiness signal, not a
/// poll of the disk against a clock).
fn start_late(t: &cubby::Toolset) {
    let (said, heard) = std::sync::mpsc::channel::<()>();
    let said = std::sync::Mutex::new(said);
    t.subscribe(std::sync::Arc::new(
        move |event: &cubby::process::OutputEvent| {
            if event.process == "late" && event.chunk.contains("LEFT-LATE") {
                let _ = said.lock().unwrap().send(());
            }
        },
    ));
    ok(
        t,
        "start_process",
        json!({"name": "late", "command": LEAVES_LATE}),
    );
    heard
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("the process never said it left its file");
}

/// SPEC §5.1: `$CUBBY_OUTPUT_DIR` is collected after each `run` *and when
/// the run ends*: what a background process leaves there after the last
/// `run` becomes an artifact of the run — by `Toolset::end` (its FileRefs
/// returned, in the run's list, once), and by the drop of the last clone
/// of a run never ended — its bytes in the store, the process stopped.
#[test]
fn what_a_background_process_leaves_is_collected_when_the_run_ends() {
    let sha = sha256_hex(b"late bytes");
    for by_drop in [false, true] {
        let r = Run::new();
        let t = r.toolset();
        start_late(&t);
        assert!(t.artifacts().list().is_empty());
        if by_drop {
            drop(t);
        } else {
            let end = t.end();
            assert!(t.has_ended());
            assert_eq!(end.published.len(), 1, "{end:?}");
            let file = &end.published[0];
            assert_eq!(file.name, "late.txt");
            assert_eq!(file.sha256, sha);
            assert_eq!(t.artifacts().list(), end.published);
            assert!(
                t.processes()
                    .list()
                    .iter()
                    .all(|p| p.status() != cubby::process::Status::Running),
                "the run's end stops its processes"
            );
            assert_eq!(t.end(), cubby::RunEnd::default(), "a run ends once");
            // A later run of the workspace is seeded with it.
            let next = r.toolset();
            let seeded = next.seed(std::slice::from_ref(file)).unwrap();
            assert_eq!(seeded[0].sha256, sha);
        }
        assert_eq!(r.blob(&sha), b"late bytes");
    }
}

/// Red-team 4, R4-5: the collector read each file whole (25 MB) before the
/// run's budget refused it, and did it again at every `run` (400 sparse
/// files: 21–26 s of server CPU a call); and every entry past the 20,000
/// cap was listed. Files past the budget are now refused by their size,
/// unread, and the walk stops reading a directory at the cap.
#[test]
fn files_past_the_budget_are_refused_unread_and_the_walk_stops_at_its_cap() {
    let r = Run::new();
    let t = r.unhurried_toolset();
    // The oracle: within the budget, a sparse file is read and published.
    let started = std::time::Instant::now();
    let out = ok(
        &t,
        "run",
        json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && for i in 1 2 3; do \
            head -c 24000000 /dev/urandom > r$i; done && truncate -s 24000000 sparse0 \
            && touch -a -d @1000000000 sparse0"}),
    );
    assert_eq!(artifacts_of(&out).len(), 4, "{}", out.text);
    // A read moves a file's access time when it is older than its change
    // (relatime): the collector read this one.
    let read = |name: &str| {
        use std::os::unix::fs::MetadataExt;
        let found: Vec<i64> = std::fs::read_dir(r.root.join(".cubby/output"))
            .unwrap()
            .flatten()
            .filter_map(|d| std::fs::metadata(d.path().join(name)).ok())
            .map(|m| m.atime())
            .collect();
        assert_eq!(found.len(), 1, "{name}");
        found[0] != 1_000_000_000
    };
    assert!(
        read("sparse0"),
        "the control: a file within the budget is read"
    );
    eprintln!(
        "R4-5: 3 × 24 MB random + one 24 MB sparse file written and collected (each scanned \
         for compressed secrets): {:?}",
        started.elapsed()
    );
    // 200 sparse files of 24.9 MB: 5 GB to read the old way, each time.
    let started = std::time::Instant::now();
    let out = ok(
        &t,
        "run",
        json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && for i in $(seq 200); do \
            truncate -s 24999999 s$i && touch -a -d @1000000000 s$i; done"}),
    );
    let first = started.elapsed();
    assert!(artifacts_of(&out).is_empty(), "{}", out.text);
    assert!(
        out.text
            .contains("limit: 24999999 bytes do not fit in this run's artifact budget"),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("skipped 180 more file(s) (180 of them for `limit`)"),
        "{}",
        out.text
    );
    let started = std::time::Instant::now();
    let again = ok(&t, "run", json!({"command": "true"}));
    let second = started.elapsed();
    assert!(artifacts_of(&again).is_empty());
    eprintln!("R4-5: 200 sparse files past the budget: the run {first:?}, the next run {second:?}");
    // Not one of them was read, by either collection.
    for i in 1..=200 {
        assert!(!read(&format!("s{i}")), "s{i} was read");
    }
    // Past the entry cap the walk stops reading, and says so in one line.
    let r = Run::new();
    let t = r.unhurried_toolset();
    let out = ok(
        &t,
        "run",
        json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && mkdir d && cd d && seq -f 'f%g' 20500 | xargs touch"}),
    );
    let skipped = out.structured["skipped"].as_array().unwrap();
    assert!(skipped.len() <= 22, "{}", skipped.len());
    assert!(
        out.text
            .contains("skipped the rest: limit: one collection looks at 20000 entries"),
        "{}",
        &out.text[out.text.len().saturating_sub(600)..]
    );
    // A line per artifact (1,000), 20 skipped named, two counting lines.
    assert!(
        out.text.lines().count() < 1030,
        "{}",
        out.text.lines().count()
    );
}

/// A collection stops once it has taken the run's collection time
/// ([`cubby::artifact::MAX_COLLECT_TIME`] by default), says so, and leaves
/// what it did not reach where it is. The control: the same files with
/// the default time are all published.
#[test]
fn a_collection_past_its_time_stops_says_so_and_loses_nothing() {
    let leave = json!({"command": "cd \"$CUBBY_OUTPUT_DIR\" && for i in 1 2 3; do \
        echo $i > f$i.txt; done"});
    let r = Run::new();
    let out = ok(&r.toolset(), "run", leave.clone());
    assert_eq!(artifacts_of(&out).len(), 3, "{}", out.text);

    let r = Run::new();
    let t = r.toolset_with(cubby::artifact::Budget {
        collect_time: std::time::Duration::ZERO,
        ..cubby::artifact::Budget::default()
    });
    let out = ok(&t, "run", leave);
    assert!(artifacts_of(&out).is_empty(), "{}", out.text);
    assert!(
        out.text.contains(
            "skipped the rest: limit: one collection takes at most 0 s; what is left is \
             collected by the next run"
        ),
        "{}",
        out.text
    );
    // Not collected is not lost: the files are still in the run's output
    // directory.
    let left: Vec<_> = std::fs::read_dir(r.root.join(".cubby/output"))
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.file_name())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
}
