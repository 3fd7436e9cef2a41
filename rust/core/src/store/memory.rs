//! Committed state of in-memory stores (Kafka's `InMemoryKeyValueStore`): an ordered map.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::RwLock;

use crate::error::{Error, Result};
use crate::store::committed::{CommittedState, OffsetWrite, Write};
use crate::store::key_range::{Direction, KeyRange};
use crate::store::merge::SortedSource;

#[derive(Default)]
pub struct MemoryState {
    // The lock lets a read-committed view read while the writer applies a commit.
    data: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    offsets: RwLock<HashMap<String, i64>>,
}

fn poisoned<T>(_: T) -> Error {
    Error::InvalidState("in-memory store lock poisoned by an earlier failure".into())
}

/// A source that copies the map in small batches, each under a short read lock, so a scan never
/// holds the lock across calls and a view never blocks the writer for long.
struct MapSource<'a> {
    state: &'a MemoryState,
    rest: KeyRange,
    direction: Direction,
    batch: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    head: Option<(Vec<u8>, Vec<u8>)>,
}

const BATCH: usize = 1024;

impl MapSource<'_> {
    fn refill(&mut self) -> Result<()> {
        let data = self.state.data.read().map_err(poisoned)?;
        let batch: Vec<(Vec<u8>, Vec<u8>)> = if self.rest.is_empty() {
            Vec::new()
        } else {
            let lower = self
                .rest
                .lower
                .clone()
                .map_or(Bound::Unbounded, Bound::Included);
            let upper = self
                .rest
                .upper
                .clone()
                .map_or(Bound::Unbounded, Bound::Excluded);
            let in_range = data.range::<Vec<u8>, _>((lower, upper));
            let copy = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
            match self.direction {
                Direction::Forward => in_range.take(BATCH).map(copy).collect(),
                Direction::Reverse => in_range.rev().take(BATCH).map(copy).collect(),
            }
        };
        if let Some((last, _)) = batch.last() {
            self.rest = self.rest.after(last, self.direction);
        }
        self.batch = batch.into_iter();
        self.head = self.batch.next();
        Ok(())
    }
}

impl SortedSource for MapSource<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.head.as_ref().map(|(k, _)| k.as_slice())
    }
    fn value(&self) -> Result<Option<std::borrow::Cow<'_, [u8]>>> {
        Ok(self
            .head
            .as_ref()
            .map(|(_, v)| std::borrow::Cow::Borrowed(v.as_slice())))
    }
    fn advance(&mut self) -> Result<()> {
        self.head = self.batch.next();
        if self.head.is_none() {
            self.refill()?;
        }
        Ok(())
    }
}

impl CommittedState for MemoryState {
    fn read(&self, key: &[u8], _migrate: bool, visit: &mut dyn FnMut(Option<&[u8]>)) -> Result<()> {
        visit(
            self.data
                .read()
                .map_err(poisoned)?
                .get(key)
                .map(Vec::as_slice),
        );
        Ok(())
    }

    fn sources<'a>(
        &'a self,
        range: &KeyRange,
        direction: Direction,
    ) -> Result<Vec<Box<dyn SortedSource + 'a>>> {
        let mut source = MapSource {
            state: self,
            rest: range.clone(),
            direction,
            batch: Vec::new().into_iter(),
            head: None,
        };
        source.refill()?;
        Ok(vec![Box::new(source)])
    }

    fn apply(
        &self,
        writes: &mut dyn Iterator<Item = Write<'_>>,
        offset: Option<OffsetWrite<'_>>,
    ) -> Result<()> {
        let mut data = self.data.write().map_err(poisoned)?;
        for (key, value) in writes {
            match value {
                Some(v) => data.insert(key.to_vec(), v.to_vec()),
                None => data.remove(key),
            };
        }
        if let Some(OffsetWrite {
            key,
            offset,
            stream_time,
            segmented_stream_time,
        }) = offset
        {
            let mut offsets = self.offsets.write().map_err(poisoned)?;
            match offset {
                Some(o) => offsets.insert(key.to_string(), o),
                None => offsets.remove(key),
            };
            if let Some(time) = stream_time {
                offsets.insert(
                    crate::format::offsets::TTL_STREAM_TIME_KEY.to_string(),
                    time,
                );
            }
            if let Some(time) = segmented_stream_time {
                offsets.insert(
                    crate::format::offsets::SEGMENTED_STREAM_TIME_KEY.to_string(),
                    time,
                );
            }
        }
        Ok(())
    }

    fn committed_offset(&self, key: &str) -> Result<Option<i64>> {
        Ok(self.offsets.read().map_err(poisoned)?.get(key).copied())
    }

    fn approximate_num_entries(&self) -> Result<u64> {
        Ok(self.data.read().map_err(poisoned)?.len() as u64)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
