//! The worker pool that runs data requests (read, write, fsync,
//! fallocate) off the FUSE session thread.
//!
//! fuser reads and dispatches requests on one thread; a reply may be sent
//! from any thread. So the session thread does the quick metadata work
//! itself and hands the data requests, which may block in reclaim, in
//! `balance_dirty_pages` or on the backing disk, to these threads. The
//! kernel sends several requests at once (FUSE_ASYNC_READ, several
//! processes), and they then run in parallel through the cache, as reads
//! and writes do through the kernel's.
//!
//! The queue is bounded: when every worker is busy and `QUEUE_DEPTH` jobs
//! wait, the session thread blocks, which stops it taking more requests
//! from the kernel: back-pressure instead of unbounded memory.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send>;

/// Jobs that may wait for a worker.
const QUEUE_DEPTH: usize = 256;

pub struct Workers {
    tx: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    pub fn new(n: usize) -> std::io::Result<Workers> {
        let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::with_capacity(n);
        for i in 0..n.max(1) {
            let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
            threads.push(std::thread::Builder::new().name(format!("fuse-worker{i}")).spawn(move || loop {
                // The lock is held only to take one job, not to run it.
                let job = rx.lock().recv();
                match job {
                    Ok(job) => job(),
                    Err(_) => return, // the pool is shutting down
                }
            })?);
        }
        Ok(Workers { tx: Some(tx), threads })
    }

    /// Run `job` on a worker. After `shutdown` the job runs here instead,
    /// so no request is ever left without a reply.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    (e.0)();
                }
            }
            None => job(),
        }
    }

    /// Stop taking jobs, finish the queued ones and join the threads.
    pub fn shutdown(&mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
