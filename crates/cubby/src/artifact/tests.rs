//! The run's budget, names and URIs over a real store in a temp dir.

use std::sync::{Arc, Barrier};

use sha2::{Digest, Sha256};

use super::*;

fn run(budget: Budget) -> (tempfile::TempDir, Artifacts) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    (dir, Artifacts::new(store, budget))
}

fn named(name: &str) -> Publish {
    Publish {
        name: name.into(),
        ..Publish::default()
    }
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn blobs(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("sha256"))
        .unwrap()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .sum()
}

#[test]
fn parallel_publications_share_the_run_budget_and_none_is_torn() {
    const MB20: usize = 20_000_000;
    let (dir, artifacts) = run(Budget::default());
    let artifacts = Arc::new(artifacts);
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let (artifacts, barrier) = (artifacts.clone(), barrier.clone());
            std::thread::spawn(move || {
                let bytes = vec![i; MB20];
                barrier.wait();
                let out = artifacts.publish_bytes(&named(&format!("part{i}.bin")), &bytes);
                (hex(&bytes), out)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: Vec<_> = results
        .iter()
        .filter_map(|(h, r)| r.as_ref().ok().map(|p| (h, p)))
        .collect();
    let refused: Vec<_> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    assert_eq!(ok.len(), 5, "five 20 MB artifacts fit 100 MB exactly");
    assert_eq!(refused.len(), 3);
    for e in &refused {
        assert_eq!(e.kind(), ErrorKind::Limit, "{e:?}");
        assert!(e.message().contains("100000000"), "{e:?}");
    }
    for (digest, published) in &ok {
        assert_eq!(&published.file.sha256, *digest);
        let on_disk = std::fs::read(artifacts.store().path_of(digest).unwrap()).unwrap();
        assert_eq!(on_disk.len(), MB20);
        assert_eq!(
            &hex(&on_disk),
            *digest,
            "stored bytes are the published bytes"
        );
    }
    assert_eq!(artifacts.usage(), (100_000_000, 5));
    assert_eq!(blobs(dir.path()), 5);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
}

#[test]
fn the_same_bytes_under_two_names_are_stored_and_counted_once() {
    let (dir, artifacts) = run(Budget::default());
    let a = artifacts
        .publish_bytes(&named("a.txt"), b"same bytes\n")
        .unwrap();
    let b = artifacts
        .publish_bytes(&named("b.txt"), b"same bytes\n")
        .unwrap();
    assert_eq!(a.file.sha256, b.file.sha256);
    assert_ne!(a.file.uri, b.file.uri);
    assert!(a.new && b.new);
    assert_eq!(blobs(dir.path()), 1);
    assert_eq!(artifacts.usage(), (11, 2));
}

#[test]
fn a_name_taken_by_other_bytes_is_numbered_and_a_republication_is_the_same_artifact() {
    let (_dir, artifacts) = run(Budget::default());
    let first = artifacts
        .publish_bytes(&named("report.pdf"), b"%PDF-1 one")
        .unwrap();
    let second = artifacts
        .publish_bytes(&named("report.pdf"), b"%PDF-1 two")
        .unwrap();
    let third = artifacts
        .publish_bytes(&named("report.pdf"), b"%PDF-1 three")
        .unwrap();
    assert_eq!(first.file.name, "report.pdf");
    assert_eq!(second.file.name, "report (2).pdf");
    assert_eq!(third.file.name, "report (3).pdf");
    let again = artifacts
        .publish_bytes(&named("report.pdf"), b"%PDF-1 one")
        .unwrap();
    assert!(!again.new);
    assert_eq!(again.file, first.file);
    let names: Vec<_> = artifacts.list().into_iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        ["report (3).pdf", "report (2).pdf", "report.pdf"],
        "newest first"
    );
    assert_eq!(artifacts.usage().1, 3);
}

#[test]
fn nfd_and_nfc_are_one_name() {
    let (_dir, artifacts) = run(Budget::default());
    let nfc = artifacts
        .publish_bytes(&named("caf\u{e9}.txt"), b"1")
        .unwrap();
    let nfd = artifacts
        .publish_bytes(&named("cafe\u{301}.txt"), b"2")
        .unwrap();
    assert_eq!(nfc.file.name, "caf\u{e9}.txt");
    assert_eq!(nfd.file.name, "caf\u{e9} (2).txt");
}

#[test]
fn the_file_and_count_limits_refuse_before_writing() {
    let budget = Budget {
        file_bytes: 10,
        run_bytes: 1_000,
        count: 2,
        ..Budget::default()
    };
    let (dir, artifacts) = run(budget);
    let e = artifacts
        .publish_bytes(&named("big"), &[1; 11])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit);
    assert!(
        e.message().contains("11 bytes") && e.message().contains("10-byte"),
        "{e:?}"
    );
    artifacts.publish_bytes(&named("a"), b"a").unwrap();
    artifacts.publish_bytes(&named("b"), b"b").unwrap();
    let e = artifacts.publish_bytes(&named("c"), b"c").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit);
    assert_eq!(blobs(dir.path()), 2);
}

#[test]
fn bytes_that_grow_past_their_reservation_are_not_kept() {
    let (dir, artifacts) = run(Budget::default());
    // A file rewritten while it is collected: stat said 4 bytes, 8 arrive.
    let e = artifacts
        .publish(&named("log.txt"), 4, &mut &b"12345678"[..])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit);
    assert_eq!(artifacts.usage(), (0, 0));
    assert_eq!(blobs(dir.path()), 0);
    // Fewer bytes than stated: the digest and size are those stored.
    let p = artifacts
        .publish(&named("log.txt"), 8, &mut &b"1234"[..])
        .unwrap();
    assert_eq!(p.file.size, 4);
    assert_eq!(p.file.sha256, hex(b"1234"));
    assert_eq!(artifacts.usage(), (4, 1));
}

#[test]
fn a_declared_type_the_bytes_do_not_have_keeps_nothing() {
    let (_dir, artifacts) = run(Budget::default());
    let request = Publish {
        name: "x.pdf".into(),
        media_type: Some("application/pdf".into()),
        path: None,
    };
    let e = artifacts
        .publish_bytes(&request, b"PK\x03\x04zip")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(artifacts.usage(), (0, 0));
}

#[test]
fn uris_round_trip_and_resolve_only_in_their_run() {
    let (dir, artifacts) = run(Budget::default());
    for name in [
        "plain.txt",
        "with space & #hash?.md",
        "100%.csv",
        "caf\u{e9} \u{1F600}.txt",
    ] {
        let p = artifacts
            .publish_bytes(&named(name), name.as_bytes())
            .unwrap();
        assert!(!p.file.uri.contains([' ', '#', '?']), "{}", p.file.uri);
        assert_eq!(
            parse_uri(&p.file.uri).unwrap(),
            (p.file.sha256.clone(), name.to_string())
        );
        assert_eq!(artifacts.resolve(&p.file.uri).unwrap(), p.file);
    }
    assert!(
        artifacts
            .list()
            .iter()
            .any(|f| f.uri.ends_with("/100%25.csv"))
    );
    // Another run over the same store holds none of them.
    let other = Artifacts::new(
        Arc::new(Store::open(dir.path()).unwrap()),
        Budget::default(),
    );
    let uri = artifacts.list()[0].uri.clone();
    assert_eq!(other.resolve(&uri).unwrap_err().kind(), ErrorKind::NotFound);
    let bogus = uri_of(&"0".repeat(64), "plain.txt");
    assert_eq!(
        artifacts.resolve(&bogus).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    for bad in [
        "file:///etc/passwd",
        "cubby://artifacts/xyz/a.txt",
        &format!("{URI_PREFIX}{}", "0".repeat(64)),
        &format!("{URI_PREFIX}{}/..", "0".repeat(64)),
        &format!("{URI_PREFIX}{}/a%2Fb", "0".repeat(64)),
        &format!("{URI_PREFIX}{}/cafe%CC%81.txt", "0".repeat(64)),
    ] {
        assert_eq!(
            parse_uri(bad).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{bad}"
        );
    }
}

#[test]
fn a_read_over_its_limit_names_the_size_and_the_limit() {
    let (_dir, artifacts) = run(Budget::default());
    let p = artifacts
        .publish_bytes(&named("data.bin"), &[0; 2048])
        .unwrap();
    assert_eq!(artifacts.read(&p.file, 2048).unwrap().len(), 2048);
    let e = artifacts.read(&p.file, 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooLarge);
    assert!(
        e.message().contains("2048 bytes") && e.message().contains("1024-byte"),
        "{e:?}"
    );
}

#[test]
fn a_batch_records_nothing_before_it_finishes_and_counts_equal_bytes_once() {
    let (dir, artifacts) = run(Budget {
        file_bytes: 100,
        run_bytes: 250,
        count: 10,
        ..Budget::default()
    });
    let mut batch = artifacts.batch();
    batch.publish_bytes(&named("a.bin"), &[1; 100]).unwrap();
    // The same bytes again: their reservation goes back once they are
    // known (counted once), so a third file still fits.
    batch.publish_bytes(&named("b.bin"), &[1; 100]).unwrap();
    batch.publish_bytes(&named("c.bin"), &[2; 100]).unwrap();
    let e = batch.publish_bytes(&named("d.bin"), &[3; 100]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Limit, "{e}");
    assert!(artifacts.list().is_empty(), "recorded before it is durable");
    assert_eq!(blobs(dir.path()), 0, "named before it is durable");
    assert_eq!(artifacts.slots_taken(), 3);
    let done: Vec<Published> = batch.finish().into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|p| p.new));
    assert_eq!(done[0].file.sha256, hex(&[1; 100]));
    assert_eq!(done[1].file.sha256, done[0].file.sha256);
    assert_eq!(artifacts.usage(), (200, 3));
    assert_eq!(blobs(dir.path()), 2);
    // Dropped unfinished: the reservation goes back, nothing is kept.
    let mut batch = artifacts.batch();
    batch.publish_bytes(&named("e.bin"), &[4; 50]).unwrap();
    assert_eq!(artifacts.slots_taken(), 4);
    drop(batch);
    assert_eq!(artifacts.usage(), (200, 3));
    assert_eq!(artifacts.slots_taken(), 3);
    assert_eq!(blobs(dir.path()), 2);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
}
