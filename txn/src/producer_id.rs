//! Producer-id allocation: the controller hands out blocks of ids (a
//! `ProducerIdsRecord` in the metadata log), a broker serves `InitProducerId`
//! from its current block and asks for the next block before it runs out.

use thiserror::Error;

/// Ids per block, as Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// A contiguous range of producer ids `[first, first + size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    pub first: i64,
    pub size: i64,
}

impl ProducerIdBlock {
    /// Last id of the block.
    pub fn last(&self) -> i64 {
        self.first + self.size - 1
    }
    /// First id after the block.
    pub fn next_block_first(&self) -> i64 {
        self.first + self.size
    }
    pub fn contains(&self, id: i64) -> bool {
        id >= self.first && id <= self.last()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProducerIdError {
    /// Every id up to `i64::MAX` has been handed out (Kafka: "Exhausted all producerIds").
    #[error("all producer ids have been allocated")]
    Exhausted,
    /// The broker's block is used up and the next one has not arrived yet
    /// (Kafka answers InitProducerId with `COORDINATOR_LOAD_IN_PROGRESS` and the client retries).
    #[error("producer id block used up; waiting for the next block from the controller")]
    BlockUsedUp,
}

/// Pure, controller side: the block after `prev` (`None` = the first block, starting at 0).
pub fn next_block_after(
    prev: Option<&ProducerIdBlock>,
) -> Result<ProducerIdBlock, ProducerIdError> {
    let first = prev.map_or(0, |b| b.next_block_first());
    match first.checked_add(PRODUCER_ID_BLOCK_SIZE) {
        Some(_) => Ok(ProducerIdBlock {
            first,
            size: PRODUCER_ID_BLOCK_SIZE,
        }),
        None => Err(ProducerIdError::Exhausted),
    }
}

/// Broker side: serves ids from the current block; the I/O layer installs new
/// blocks obtained from the controller (AllocateProducerIds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerIdAllocator {
    current: Option<ProducerIdBlock>,
    next_id: i64,
    next_block: Option<ProducerIdBlock>,
}

impl ProducerIdAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs a block received from the controller; it is used once the current one is spent.
    pub fn install_block(&mut self, block: ProducerIdBlock) {
        if self.current.is_none() || self.remaining() == 0 {
            self.current = Some(block);
            self.next_id = block.first;
        } else {
            self.next_block = Some(block);
        }
    }

    /// Ids left in the current block.
    pub fn remaining(&self) -> i64 {
        self.current
            .map_or(0, |b| (b.next_block_first() - self.next_id).max(0))
    }

    /// Whether to ask the controller for the next block now: no block is queued
    /// and at least 90% of the current one is used (Kafka prefetches at 90%).
    pub fn should_prefetch(&self) -> bool {
        if self.next_block.is_some() {
            return false;
        }
        match self.current {
            None => true,
            Some(b) => self.next_id >= b.first + b.size * 9 / 10,
        }
    }

    /// Hands out the next id, moving to the queued block when the current one is spent.
    pub fn next_id(&mut self) -> Result<i64, ProducerIdError> {
        if self.remaining() == 0 {
            let Some(next) = self.next_block.take() else {
                return Err(ProducerIdError::BlockUsedUp);
            };
            self.current = Some(next);
            self.next_id = next.first;
        }
        let id = self.next_id;
        self.next_id += 1;
        Ok(id)
    }
}
