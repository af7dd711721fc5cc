//! A fixed pool of threads for file-tool calls.
//!
//! File tools are short and CPU-bound. On tokio's blocking pool, a client
//! that pipelines requests makes it spawn threads as fast as calls arrive
//! (tens of them, each with its own allocator caches) and pay a thread start
//! per burst; here a fixed number of threads, started once, take calls from
//! one queue. Command tools, which may wait on each other for minutes, stay
//! on the blocking pool.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// The pool. Its threads end when it is dropped.
pub(crate) struct FilePool {
    queue: Mutex<mpsc::Sender<Job>>,
}

impl FilePool {
    /// Starts `threads` threads.
    pub(crate) fn new(threads: usize) -> FilePool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&rx);
            let started = std::thread::Builder::new()
                .name(format!("cubby-file-{i}"))
                .spawn(move || {
                    loop {
                        // One thread waits on the queue at a time; the rest
                        // wait on the lock.
                        let job = match rx.lock() {
                            Ok(queue) => queue.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
            if let Err(e) = started {
                tracing::warn!("file-tool thread {i} did not start: {e}");
            }
        }
        FilePool {
            queue: Mutex::new(tx),
        }
    }

    /// Runs `work` on a pool thread; the receiver gets its result, or an
    /// error when it panicked or the pool is gone.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            if let Ok(out) = std::panic::catch_unwind(AssertUnwindSafe(work)) {
                let _ = tx.send(out);
            }
        });
        if let Ok(queue) = self.queue.lock() {
            let _ = queue.send(job);
        }
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_and_panics_are_errors() {
        let pool = FilePool::new(2);
        let answers: Vec<_> = (0..16).map(|i| pool.run(move || i * 2)).collect();
        for (i, rx) in answers.into_iter().enumerate() {
            assert_eq!(rx.await.unwrap(), i * 2);
        }
        let panicked = pool.run(|| -> u32 { panic!("boom") });
        assert!(panicked.await.is_err());
        // The pool still serves after a panic.
        assert_eq!(pool.run(|| 7).await.unwrap(), 7);
    }
}
