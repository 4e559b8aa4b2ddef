//! Uploads: the last one in the run's channel, the sudo password ahead of every stdin,
//! files already on the node skipped, and the release tarball with its fallback to the
//! binary.

use super::*;
use crate::arch::Arch;
use crate::outcome::Phase;
use crate::stage::{CopyFormat, CopySlot};

/// What goes first on stdin under sudo with the login password.
fn preamble() -> Vec<u8> {
    crate::remote::password_preamble(PASSWORD).into_bytes()
}

fn joined(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn the_last_upload_rides_in_the_runs_channel() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""))
        .on(&tmp("f1"), Reply::ok());
    let h = Harness::new(fake);
    let files = vec![h.file("f1", b"first file"), h.file("f2", b"second")];
    let outcome = h.process(&node(files));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!((outcome.bytes_uploaded, outcome.uploads_skipped), (16, 0));
    assert_eq!(outcome.exit_status, Some(0));

    let execs = h.execs();
    assert_eq!(execs.len(), 3, "prepare, f1, run: {execs:#?}");
    assert!(execs[0].command.contains(sent::PREPARE));
    assert_eq!(execs[0].stdin, None);
    assert!(
        execs[1]
            .command
            .contains(&format!("KB_TMP={}\n", tmp("f1")))
            && execs[1].command.contains("KB_MODE=644\n"),
        "{}",
        execs[1].command
    );
    assert_eq!(execs[1].stdin.as_deref(), Some(&b"first file"[..]));
    let run = &execs[2];
    assert!(
        run.command
            .starts_with(&format!("( KB_DIR=/tmp/kb\nKB_TMP={}\n", tmp("f2"))),
        "{}",
        run.command
    );
    assert!(run.command.contains(") || exit 201\n"), "{}", run.command);
    // Both moved into place by the one finalize.sh: its words are (tmp, name, sha256).
    let moves = run
        .command
        .lines()
        .find(|l| l.starts_with("set -- "))
        .unwrap();
    for name in ["f1", "f2"] {
        assert!(
            moves.contains(&format!(" {} {name} ", tmp(name))),
            "{}",
            run.command
        );
    }
    assert!(run.command.ends_with(JOIN), "{}", run.command);
    assert_eq!(run.stdin.as_deref(), Some(&b"second"[..]));
    assert!(transcript(&outcome).contains("uploaded f2 (6 bytes, mode 0644) in the run's channel"));
}

#[test]
fn under_sudo_the_password_goes_ahead_of_every_stdin_and_nowhere_else() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO password\n"))
        .on(&tmp("f1"), Reply::ok());
    let h = Harness::new(fake);
    let mut plan = node(vec![h.file("f1", b"one"), h.file("f2", b"two")]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);

    let execs = h.execs();
    assert_eq!(execs.len(), 3);
    // The prepare step finds out whether sudo needs the password, so it gets it anyway.
    assert!(
        execs[0].command.contains("\nif sudo -n true"),
        "{}",
        execs[0].command
    );
    assert_eq!(execs[0].stdin, Some(preamble()));
    for exec in &execs[1..] {
        assert!(
            exec.command.starts_with("sudo -S -p '' sh -c "),
            "{}",
            exec.command
        );
        assert!(!exec.command.contains(PASSWORD));
    }
    assert_eq!(execs[1].stdin, Some(joined(&[&preamble(), b"one"])));
    assert_eq!(execs[2].stdin, Some(joined(&[&preamble(), b"two"])));
}

#[test]
fn passwordless_sudo_gets_no_password() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO nopasswd\n"));
    let h = Harness::new(fake);
    let mut plan = node(vec![h.file("f1", b"one")]);
    plan.sudo = true;
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let run = h.exec_with(sent::RUN);
    assert!(run.command.starts_with("sudo -n sh -c "), "{}", run.command);
    assert_eq!(run.stdin.as_deref(), Some(&b"one"[..]));
}

#[test]
fn files_whose_sidecar_matches_are_not_uploaded_again() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(&tmp("f2"), Reply::ok());
    let h = Harness::new(fake);
    let f1 = h.file("f1", b"same");
    let f2 = h.file("f2", b"changed");
    // f1 is there with its sidecar; f2 is there with f2's sidecar but another size.
    let facts = format!(
        "KB_FILE 0 {} {}\nKB_FILE 1 3 {}\n",
        f1.size, f1.sha256, f2.sha256
    );
    let h = Harness {
        fake: h.fake.clone().on(sent::PREPARE, prepared(&facts)),
        ..h
    };
    let outcome = h.process(&node(vec![f1, f2]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!((outcome.uploads_skipped, outcome.bytes_uploaded), (1, 7));
    assert!(
        h.fake.execs_with(&tmp("f1")).is_empty(),
        "f1 neither sent nor moved"
    );
    assert_eq!(
        h.exec_with(sent::RUN).stdin.as_deref(),
        Some(&b"changed"[..])
    );
    assert!(transcript(&outcome).contains("f1 is already on the node (sha256 "));
}

#[test]
fn verify_remote_trusts_the_nodes_own_sha256_over_the_sidecar() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(&tmp("f1"), Reply::ok());
    let mut h = Harness::new(fake);
    h.verify_remote = true;
    let f1 = h.file("f1", b"tampered");
    let f2 = h.file("f2", b"intact");
    // f1's sidecar matches, but its content does not; f2's content does.
    let facts = format!(
        "KB_FILE 0 {} {}\nKB_SHA 0 {}\nKB_SHA 1 {}\n",
        f1.size,
        f1.sha256,
        "0".repeat(64),
        f2.sha256
    );
    h.fake = h.fake.clone().on(sent::PREPARE, prepared(&facts));
    let outcome = h.process(&node(vec![f1, f2]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.uploads_skipped, 1);
    assert!(h.exec_with(sent::PREPARE).command.contains("sha256sum"));
    let f1_upload = &h.fake.execs_with(&tmp("f1"))[0];
    assert!(
        f1_upload.command.contains("cat > "),
        "{}",
        f1_upload.command
    );
    assert_eq!(f1_upload.stdin.as_deref(), Some(&b"tampered"[..]));
    assert!(h.fake.execs_with(&tmp("f2")).is_empty());
}

#[test]
fn the_release_tarball_goes_instead_of_the_binary_when_the_node_can_unpack_it() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::TARBALL, Reply::ok())
        .on(sent::PREPARE, prepared("KB_TOOLS sha512sum gzip tar\n"));
    let mut h = Harness::new(fake);
    let tarball = std::fs::read(h.stage(&compressible_binary())).unwrap();
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.arch, Some(Arch::Amd64));
    assert_eq!(outcome.bytes_uploaded, tarball.len() as u64);
    assert!(h.exec_with(sent::PREPARE).command.contains("KB_TOOLS"));
    // The tarball rides behind the answer, in the prepare step's channel, and is
    // unpacked and checked before keadm runs: one channel, as for the xz copy.
    let run = h.exec_with(sent::TARBALL);
    assert_eq!(run.stdin, Some(tarball));
    let (receive, rest) = run.command.split_once("./keadm").unwrap();
    assert!(
        receive.contains("keadm-v1.0.0-linux-amd64/keadm/keadm") && receive.contains("sha512sum"),
        "{}",
        run.command
    );
    assert!(
        rest.contains("join") && receive.contains(&format!("set -- {} keadm ", tmp("keadm"))),
        "{}",
        run.command
    );
    let execs = h.execs();
    assert_eq!(
        execs.len(),
        2,
        "prepare, then the run on its channel: {execs:#?}"
    );
    assert!(execs[0].command.contains(crate::remote::FACTS_END));
    assert!(execs[1].same_channel, "{execs:#?}");
    let text = transcript(&outcome);
    assert_eq!(text.matches("prepared /tmp/kb").count(), 1, "{text}");
    assert!(
        text.contains("sent the release tarball (") && text.contains("in the run's channel"),
        "{text}"
    );
}

#[test]
fn a_node_that_cannot_unpack_the_tarball_gets_the_binary() {
    // The tarball fails in the run's channel (its script exits 201 before keadm); the
    // binary goes in the next run's channel.
    let fake = FakeTransport::new()
        .once(
            sent::TARBALL,
            Reply::exit(201).printing("KB_TARBALL_FAILED\n"),
        )
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_TOOLS sha512sum gzip tar\n"));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let tarball = std::fs::read(h.stage(&binary)).unwrap();
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    // Both crossed the wire.
    assert_eq!(
        outcome.bytes_uploaded,
        (tarball.len() + binary.len()) as u64
    );
    let runs = h.fake.execs_with(sent::RUN);
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[1].stdin, Some(binary));
    assert!(
        transcript(&outcome).contains("the node could not unpack the release tarball in the run's channel, so keadm did not run; sending the binary instead")
    );
}

#[test]
fn a_node_without_the_tools_gets_the_binary_directly() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_TOOLS gzip\n"));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    h.stage(&binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert!(h.fake.execs_with(sent::TARBALL).is_empty());
    assert_eq!(h.exec_with(sent::RUN).stdin, Some(binary));
}

/// The `format` copy staging made of the binary: its bytes, after checking they unpack
/// to it.
fn staged_copy(h: &Harness, format: CopyFormat, binary: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let staged = h.stager.as_ref().unwrap().staged(Arch::Amd64).unwrap();
    let copy = staged
        .copies
        .iter()
        .find(|slot| slot.format() == format)
        .and_then(|slot| slot.ready())
        .expect("a compressible binary gets a copy in each format");
    let bytes = std::fs::read(&copy.path).unwrap();
    assert_eq!(bytes.len() as u64, copy.size);
    let mut unpacked = Vec::new();
    match format {
        CopyFormat::Xz => liblzma::read::XzDecoder::new(&bytes[..])
            .read_to_end(&mut unpacked)
            .unwrap(),
        CopyFormat::Zstd => zstd::stream::read::Decoder::new(&bytes[..])
            .unwrap()
            .read_to_end(&mut unpacked)
            .unwrap(),
    };
    assert_eq!(unpacked, binary);
    bytes
}

fn staged_xz(h: &Harness, binary: &[u8]) -> Vec<u8> {
    staged_copy(h, CopyFormat::Xz, binary)
}

/// A node with every tool but zstd: it gets the xz copy.
const ALL_TOOLS: &str = "KB_TOOLS sha512sum gzip tar xz sha256sum\n";
/// A node with zstd too.
const WITH_ZSTD: &str = "KB_TOOLS sha512sum gzip tar xz zstd sha256sum\n";

/// zstd costs a node a sixth of xz's CPU to unpack: a node with both gets the zstd copy,
/// checked by the binary's sha256; should it fail to unpack it, the xz copy goes next.
#[test]
fn a_node_with_zstd_gets_the_zstd_copy_and_the_xz_copy_when_that_fails() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(WITH_ZSTD));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let tarball = std::fs::read(h.stage(&binary)).unwrap();
    let zst = staged_copy(&h, CopyFormat::Zstd, &binary);
    assert!(
        zst.len() < tarball.len(),
        "{} vs {}",
        zst.len(),
        tarball.len()
    );
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.bytes_uploaded, zst.len() as u64);
    let run = h.exec_with(sent::RUN);
    assert!(run.same_channel);
    assert_eq!(run.stdin, Some(zst.clone()));
    let sha256 = sha256_hex(&binary);
    let (receive, _) = run.command.split_once("./keadm").unwrap();
    assert!(
        receive.contains("KB_UNPACK=zstd\n")
            && receive.contains(&sha256)
            && !receive.contains("KB_UNPACK=xz"),
        "{}",
        run.command
    );
    assert!(transcript(&outcome).contains("sent the zstd copy of the binary"));

    let fake = FakeTransport::new()
        .once(
            "KB_ZSTD_FAILED",
            Reply::exit(201).printing("KB_ZSTD_FAILED\n"),
        )
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(WITH_ZSTD));
    let mut h = Harness::new(fake);
    h.stage(&binary);
    let xz = staged_xz(&h, &binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.bytes_uploaded, (zst.len() + xz.len()) as u64);
    let runs = h.fake.execs_with(sent::RUN);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].stdin, Some(zst));
    assert_eq!(runs[1].stdin, Some(xz));
    assert!(
        runs[1].command.contains("KB_UNPACK=xz\n"),
        "{}",
        runs[1].command
    );
    assert!(transcript(&outcome).contains(
        "the node could not unpack the zstd copy of the binary in the run's channel, so keadm did not run; sending the xz copy instead"
    ));
}

/// A keadm whose xz copy is smaller than its zstd copy, as a Go binary's is (about a
/// tenth): mostly one byte, the rest one of sixteen, from a fixed pseudo-random sequence.
fn binary_xz_packs_smaller() -> Vec<u8> {
    let mut binary = b"#!/bin/sh\necho keadm\n".to_vec();
    let mut x: u64 = 12345;
    while binary.len() < 256 << 10 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = x >> 33;
        binary.push(if v % 100 < 93 {
            b'a'
        } else {
            b'b' + ((v >> 8) % 16) as u8
        });
    }
    binary
}

/// A node in a site gets its copy over the uplink the site's nodes share: the smallest
/// copy it can unpack goes, the xz copy before the zstd copy even where the node has
/// zstd. A node in no site still gets the zstd copy.
#[test]
fn a_node_in_a_site_gets_the_smallest_copy_it_can_unpack() {
    let binary = binary_xz_packs_smaller();
    for site in [Some(crate::plan::Site::Named("s1".into())), None] {
        let fake = FakeTransport::new()
            .on(sent::RUN, Reply::ok())
            .on(sent::PREPARE, prepared(WITH_ZSTD));
        let mut h = Harness::new(fake);
        h.stage(&binary);
        let zst = staged_copy(&h, CopyFormat::Zstd, &binary);
        let xz = staged_xz(&h, &binary);
        assert!(xz.len() < zst.len(), "xz {} zstd {}", xz.len(), zst.len());
        let mut node = staged_node(vec![]);
        node.site = site.clone();
        let outcome = h.process(&node);
        assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
        let (copy, format) = match site {
            Some(_) => (xz, "xz"),
            None => (zst, "zstd"),
        };
        assert_eq!(outcome.bytes_uploaded, copy.len() as u64, "{site:?}");
        assert_eq!(h.exec_with(sent::RUN).stdin, Some(copy), "{site:?}");
        assert!(
            transcript(&outcome).contains(&format!("sent the {format} copy of the binary")),
            "{site:?}"
        );
    }
}

/// A cold run whose xz copy is whole while its zstd copy is still being made: a node with
/// zstd gets the xz copy at once, and says why.
#[test]
fn a_node_with_zstd_gets_the_xz_copy_while_the_zstd_copy_is_being_made() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(WITH_ZSTD));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let sha256 = sha256_hex(&binary);
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(h.bin_dir())
        .unwrap();
    let _busy = crate::stage::pretend_being_made(CopyFormat::Zstd, &h.bin_dir(), &sha256);
    h.stage_cold(&binary, Gate::opened());
    let staged = h.stager.as_ref().unwrap().staged(Arch::Amd64).unwrap();
    assert!(staged.copies[0].being_made(), "{:?}", staged.copies);
    staged.copies[1].wait();
    let xz = staged_xz(&h, &binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(h.exec_with(sent::RUN).stdin, Some(xz));
    let text = transcript(&outcome);
    assert!(
        text.contains(
            "the zstd copy of keadm is still being made on this machine, so the node gets the xz copy instead of waiting for it"
        ),
        "{text}"
    );
}

#[test]
fn the_xz_copy_goes_first_to_a_node_with_xz_and_is_checked_by_the_binarys_sha256() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::XZ, Reply::ok())
        .on(sent::PREPARE, prepared(ALL_TOOLS));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let tarball = std::fs::read(h.stage(&binary)).unwrap();
    let xz = staged_xz(&h, &binary);
    assert!(
        xz.len() < tarball.len(),
        "{} vs {}",
        xz.len(),
        tarball.len()
    );
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.bytes_uploaded, xz.len() as u64);
    // The xz copy rides behind the answer, in the prepare step's channel: one channel.
    assert_eq!(h.fake.execs().len(), 2, "{:?}", h.fake.execs());
    let run = h.exec_with(sent::RUN);
    assert!(run.same_channel);
    assert_eq!(run.stdin, Some(xz));
    let sha256 = sha256_hex(&binary);
    let (receive, rest) = run.command.split_once("./keadm").unwrap();
    assert!(
        receive.contains("KB_UNPACK=xz\n")
            && receive.contains(&sha256)
            && receive.contains(&tmp("keadm")),
        "received before keadm runs, checked by the binary's sha256: {}",
        run.command
    );
    assert!(rest.contains("join"), "{}", run.command);
    assert!(h.fake.execs_with(sent::TARBALL).is_empty());
    assert!(
        run.command
            .contains(&format!("set -- {} keadm {sha256}\n", tmp("keadm"))),
        "the sidecar is written from the known digest: {}",
        run.command
    );
    assert!(transcript(&outcome).contains("sent the xz copy of the binary"));
}

/// A cold run: a node whose upload starts while the xz copy is still being made gets the
/// release tarball at once, and says why; one that starts once the copy is whole gets the
/// copy.
#[test]
fn uploads_that_start_before_the_xz_copy_is_done_send_the_tarball_and_later_ones_the_copy() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::TARBALL, Reply::ok())
        .on(sent::PREPARE, prepared(ALL_TOOLS));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let gate = Gate::closed();
    let tarball = std::fs::read(h.stage_cold(&binary, gate.clone())).unwrap();
    let staged = h.stager.as_ref().unwrap().staged(Arch::Amd64).unwrap();
    assert!(staged.copies.iter().all(CopySlot::being_made));

    let first = h.process(&staged_node(vec![]));
    assert_eq!(first.phase, Phase::Succeeded, "{:?}", first.error);
    assert_eq!(first.bytes_uploaded, tarball.len() as u64);
    let run = h.exec_with(sent::TARBALL);
    assert!(
        run.same_channel && run.command.contains("./keadm join"),
        "{run:#?}"
    );
    assert_eq!(run.stdin, Some(tarball));
    let text = transcript(&first);
    assert!(
        text.contains(
            "the xz copy of keadm is still being made on this machine, so the node gets the release tarball instead of waiting for it"
        ),
        "{text}"
    );

    gate.open();
    let copies: Vec<_> = staged.copies.iter().map(CopySlot::wait).collect();
    let xz = std::fs::read(&copies[1].as_ref().unwrap().path).unwrap();
    let mut later = staged_node(vec![]);
    later.index = 1;
    later.name = "edge-1".into();
    let second = h.process(&later);
    assert_eq!(second.phase, Phase::Succeeded, "{:?}", second.error);
    assert_eq!(second.bytes_uploaded, xz.len() as u64);
    assert_eq!(
        h.fake.execs_with(sent::TARBALL).len(),
        1,
        "{:#?}",
        h.execs()
    );
    let run = h.fake.execs_with(sent::RUN).pop().unwrap();
    assert_eq!(run.stdin, Some(xz));
    let text = transcript(&second);
    assert!(text.contains("sent the xz copy of the binary"), "{text}");
    assert!(!text.contains("still being made"), "{text}");
}

#[test]
fn a_node_that_cannot_unpack_the_xz_copy_gets_the_tarball_then_the_binary() {
    // xz fails in the run's channel (its script exits 201 before keadm), then the
    // tarball works in the next run's channel.
    let fake = FakeTransport::new()
        .once(sent::XZ, Reply::exit(201).printing("KB_XZ_FAILED\n"))
        .on(sent::RUN, Reply::ok())
        .on(sent::TARBALL, Reply::ok())
        .on(sent::PREPARE, prepared(ALL_TOOLS));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    let tarball = std::fs::read(h.stage(&binary)).unwrap();
    let xz = staged_xz(&h, &binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.bytes_uploaded, (xz.len() + tarball.len()) as u64);
    let runs = h.fake.execs_with(sent::RUN);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].stdin, Some(xz.clone()));
    assert!(runs[0].same_channel && !runs[1].same_channel, "{runs:#?}");
    assert_eq!(runs[1].stdin, Some(tarball.clone()));
    assert!(
        runs[1].command.contains(sent::TARBALL),
        "{}",
        runs[1].command
    );
    assert!(!runs[1].command.contains("xz -dc"), "{}", runs[1].command);
    assert!(transcript(&outcome).contains(
        "the node could not unpack the xz copy of the binary in the run's channel, so keadm did not run; sending the release tarball instead"
    ));

    // Both fail: the binary rides in the third run's channel.
    let fake = FakeTransport::new()
        .once(sent::XZ, Reply::exit(201).printing("KB_XZ_FAILED\n"))
        .once(
            sent::TARBALL,
            Reply::exit(201).printing("KB_TARBALL_FAILED\n"),
        )
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(ALL_TOOLS));
    let mut h = Harness::new(fake);
    h.stage(&binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(
        outcome.bytes_uploaded,
        (xz.len() + tarball.len() + binary.len()) as u64
    );
    let runs = h.fake.execs_with(sent::RUN);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[2].stdin, Some(binary));
}

#[test]
fn a_node_with_xz_but_without_sha256sum_gets_the_tarball() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::TARBALL, Reply::ok())
        .on(sent::PREPARE, prepared("KB_TOOLS sha512sum gzip tar xz\n"));
    let mut h = Harness::new(fake);
    let tarball = std::fs::read(h.stage(&compressible_binary())).unwrap();
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert!(h.fake.execs_with(sent::XZ).is_empty());
    assert_eq!(outcome.bytes_uploaded, tarball.len() as u64);
}

#[test]
fn a_node_with_a_working_openssl_checks_the_unpacked_xz_copy_with_it() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_TOOLS xz sha256sum openssl\n"));
    let mut h = Harness::new(fake);
    let binary = compressible_binary();
    h.stage(&binary);
    let xz = staged_xz(&h, &binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let run = h.exec_with(sent::RUN);
    assert_eq!(run.stdin, Some(xz));
    assert!(
        run.command.contains("KB_UNPACK=xz\n") && run.command.contains("KB_HASHER=openssl\n"),
        "{}",
        run.command
    );
}
