//! The parent side of a checkpointed run: start `gpulab train … --jsonl` as a child process,
//! follow its JSON lines, ask it to save, and kill it for real (SIGKILL on Unix,
//! TerminateProcess on Windows). The parent survives the child's death and any bad output.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::train::TrainEvent;
use gpulab_core::error::{Error, Result};

/// One line from the child.
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    Event(TrainEvent),
    /// Output that is not one of our events (kept for the error message, never trusted).
    Unexpected(String),
}

/// How many of the child's last stderr lines to keep for error messages.
const STDERR_KEEP: usize = 20;

pub struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Line>,
    /// A line taken while checking whether the output ended, handed out by the next `next`.
    peeked: Option<Line>,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    done: bool,
}

/// The gpulab binary to start: $GPULAB_EXE, else this program if it is gpulab, else the
/// gpulab next to (or one folder above) this program — where cargo puts it for tests.
pub fn gpulab_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("GPULAB_EXE") {
        return Ok(p.into());
    }
    let me = std::env::current_exe().map_err(|e| Error::Io { path: "current executable".into(), source: e })?;
    let name = format!("gpulab{}", std::env::consts::EXE_SUFFIX);
    if me.file_name().is_some_and(|n| n == name.as_str()) {
        return Ok(me);
    }
    let dir = me.parent().unwrap_or(Path::new("."));
    [dir.join(&name), dir.join("..").join(&name)].into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Error::InvalidConfig(format!("cannot find the gpulab program to run training in (looked beside {}); set GPULAB_EXE", me.display()))
    })
}

impl ChildProcess {
    /// Starts `exe args…` with piped stdin/stdout/stderr and threads that read its output.
    pub fn spawn(exe: &Path, args: &[String]) -> Result<ChildProcess> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Io { path: exe.into(), source: e })?;
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let l = TrainEvent::parse_line(&line).map(Line::Event).unwrap_or(Line::Unexpected(line));
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (err, keep) = (child.stderr.take().expect("stderr is piped"), stderr.clone());
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                let mut k = keep.lock().unwrap_or_else(|p| p.into_inner());
                k.push(line);
                if k.len() > STDERR_KEEP {
                    k.remove(0);
                }
            }
        });
        Ok(ChildProcess { stdin: child.stdin.take(), child, lines, peeked: None, stderr, stderr_reader: Some(stderr_reader), done: false })
    }

    /// The next line, waiting up to `timeout`; None on timeout or once the output has ended.
    pub fn next(&mut self, timeout: Duration) -> Option<Line> {
        if let Some(l) = self.peeked.take() {
            return Some(l);
        }
        self.lines.recv_timeout(timeout).ok()
    }

    /// True once the child closed its output (it exited or was killed) and every line was read.
    pub fn output_ended(&mut self) -> bool {
        if self.peeked.is_some() {
            return false;
        }
        match self.lines.try_recv() {
            Ok(l) => {
                self.peeked = Some(l);
                false
            }
            Err(mpsc::TryRecvError::Empty) => false,
            Err(mpsc::TryRecvError::Disconnected) => true,
        }
    }

    /// Asks the child to write a checkpoint after its current step.
    pub fn request_save(&mut self) -> Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| Error::InvalidConfig("the training process has no input pipe".into()))?;
        stdin.write_all(b"save\n").and_then(|_| stdin.flush()).map_err(|e| Error::Io { path: "training process stdin".into(), source: e })
    }

    /// A real crash: SIGKILL (TerminateProcess on Windows), then reap the process.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        // An error here means it already exited; `wait` below still reaps it.
        let _ = self.child.kill();
        self.wait()
    }

    pub fn wait(&mut self) -> Result<ExitStatus> {
        self.stdin = None;
        let s = self.child.wait().map_err(|e| Error::Io { path: "training process".into(), source: e })?;
        self.done = true;
        // Its stderr is complete once the reader has seen the pipe close.
        if let Some(r) = self.stderr_reader.take() {
            let _ = r.join();
        }
        Ok(s)
    }

    /// The child's last lines on stderr, for error messages.
    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
    }
}

impl Drop for ChildProcess {
    /// A parent that stops early never leaves its training process behind.
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
