//! The whole tool against real sshd nodes on loopback: each case asserts files on the
//! node, lines in batch_process_log.txt, and the exit code.

mod common;

use common::fake_keadm::{self, FakeKeadm};
use common::fleet::{Fleet, KeyKind, NodeOpt};
use common::scenario::{Login, Scenario, remote_keadm};

#[test]
fn password_login_enrolls_every_node() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("I0806 join.go:78] 10. Install Complete!"));
    let out = sc.run(&[]);
    out.status(0);
    for i in 0..3 {
        out.log_has(&format!("Successfully processed node {}", Scenario::name(i)));
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i)));
        assert_eq!(calls.len(), 1, "node {i} ran keadm once");
        assert_eq!(calls[0].cwd, "/tmp/kubeedge/keadm");
        assert_eq!(
            calls[0].args,
            ["join", "--cloudcore-ipport=192.0.2.10:10000", &format!("--edgenode-name={}", Scenario::name(i)), "--token=abc.def"]
        );
        let transcript = out.transcript(i);
        assert!(transcript.contains("Install Complete!"), "{transcript}");
        assert!(transcript.contains("--token=***"), "{transcript}");
        assert!(!transcript.contains("abc.def"), "the token leaked into the transcript");
    }
    assert_eq!(out.log_lines().len(), 3);
    let summary = out.summary();
    assert_eq!(summary["totals"]["succeeded"], 3);
    assert_eq!(summary["nodes"][0]["arch"], "amd64");
}
