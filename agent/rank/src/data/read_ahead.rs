//! Reading shuffle windows ahead, on a thread of its own: the batch reader
//! asks for window w+1 when it begins window w and keeps forming batches of
//! w from memory meanwhile, so a slow store (S3) or a costly decode (parquet)
//! overlaps training instead of stalling it. Requests and answers are in
//! order; at most two requests wait.

use super::error::ReadError;
use super::rows::RowReader;
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// One window's rows for this rank: (epoch, window), row index by sample id.
pub struct AheadWindow {
    pub key: WindowKey,
    pub index: HashMap<u64, usize>,
    pub rows: Vec<u8>,
}

/// A window of an epoch: (epoch, window).
pub type WindowKey = (u64, u64);
type Request = (WindowKey, Vec<u64>);
type Answer = (WindowKey, Result<AheadWindow, ReadError>);

pub struct ReadAhead {
    requests: Option<SyncSender<Request>>,
    answers: Receiver<Answer>,
    handle: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub fn spawn(mut reader: RowReader) -> Self {
        let (requests, inbox) = sync_channel::<Request>(2);
        let (outbox, answers) = sync_channel::<Answer>(2);
        let handle = std::thread::Builder::new()
            .name("cohort-read-ahead".into())
            .spawn(move || {
                for (key, mut ids) in inbox {
                    ids.sort_unstable();
                    ids.dedup();
                    let mut rows = vec![0u8; ids.len() * reader.catalog.row_bytes()];
                    let read = reader.fill(&ids, &mut rows).map(|()| AheadWindow {
                        key,
                        index: ids.iter().enumerate().map(|(i, &id)| (id, i)).collect(),
                        rows,
                    });
                    if outbox.send((key, read)).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the read-ahead thread");
        Self {
            requests: Some(requests),
            answers,
            handle: Some(handle),
        }
    }

    pub fn request(&self, key: WindowKey, ids: Vec<u64>) -> Result<(), ReadError> {
        self.requests
            .as_ref()
            .expect("open until dropped")
            .send((key, ids))
            .map_err(|_| ReadError::Io("the read-ahead thread stopped".into()))
    }

    /// The answer for `key`, skipping answers for windows nobody waits for
    /// any more (read ahead for an epoch that ended).
    pub fn wait(&self, key: WindowKey) -> Result<AheadWindow, ReadError> {
        loop {
            let (got, read) = self
                .answers
                .recv()
                .map_err(|_| ReadError::Io("the read-ahead thread stopped".into()))?;
            if got == key {
                return read;
            }
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the requests ends the thread after its current read.
        drop(self.requests.take());
        let (_, empty) = sync_channel(1);
        drop(std::mem::replace(&mut self.answers, empty));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
