//! A real ssh-agent for agent logins, started for one test and stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An ssh-agent on its own socket, killed (by pid) on drop.
pub struct Agent {
    child: Child,
    pub socket: PathBuf,
}

impl Agent {
    /// Starts an agent with its socket in `dir` and adds `key` to it.
    pub fn start(dir: &Path, key: &Path) -> Agent {
        let socket = dir.join("agent.sock");
        let child = Command::new("ssh-agent")
            .args(["-D", "-a"])
            .arg(&socket)
            .stdout(Stdio::null())
            .spawn()
            .expect("start ssh-agent");
        let agent = Agent { child, socket };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !agent.socket.exists() {
            assert!(
                Instant::now() < deadline,
                "ssh-agent did not create its socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The socket goes to ssh-add's environment only; this process's stays untouched.
        let status = Command::new("ssh-add")
            .arg("-q")
            .arg(key)
            .env("SSH_AUTH_SOCK", &agent.socket)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "ssh-add failed");
        agent
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
