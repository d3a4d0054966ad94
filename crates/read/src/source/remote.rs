//! Reading one Parquet object from a store: its footer with two ranged
//! requests, then only the column chunks a read needs, through Parquet's
//! push decoder (it asks for byte ranges; this module fetches them).

use std::sync::Arc;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::DecodeResult;
use refscore_core::Error;
use sha2::{Digest, Sha256};

use super::{Failure, Footer, ReadPlan};
use refscore_store::{store_error, ObjectFile};

/// Bytes asked for at the end of an object: most footers fit, so one
/// request reads the footer and its length together.
const TAIL: u64 = 64 * 1024;

/// Reads and checks the footer of `object` (named `shown` in messages).
pub(crate) fn read_footer(object: &ObjectFile, shown: &str) -> Result<Footer, Error> {
    let len = object.size;
    if len < 12 {
        return Err(Error::bad_input(format!(
            "{shown}: not a Parquet file ({len} bytes)"
        )));
    }
    let tail_start = len.saturating_sub(TAIL).max(4);
    let got = object
        .ranges(&[0..4, tail_start..len])
        .map_err(|e| store_error(shown, &e))?;
    if got[0].as_ref() != b"PAR1" {
        return Err(Error::bad_input(format!(
            "{shown}: not a Parquet file (no PAR1 magic at the start)"
        )));
    }
    let tail = &got[1];
    if &tail[tail.len() - 4..] != b"PAR1" {
        return Err(Error::bad_input(format!(
            "{shown}: truncated or corrupt Parquet file (no footer; {len} bytes)"
        )));
    }
    let footer_len =
        u32::from_le_bytes(tail[tail.len() - 8..tail.len() - 4].try_into().unwrap()) as u64;
    if footer_len + 8 > len - 4 {
        return Err(Error::bad_input(format!(
            "{shown}: corrupt Parquet footer (it claims {footer_len} bytes of a {len}-byte file)"
        )));
    }
    let footer_start = len - 8 - footer_len;
    let footer = if footer_start >= tail_start {
        let at = (footer_start - tail_start) as usize;
        tail.slice(at..tail.len() - 8)
    } else {
        object
            .ranges(&[footer_start..len - 8])
            .map_err(|e| store_error(shown, &e))?
            .remove(0)
    };
    let metadata = ParquetMetaDataReader::decode_metadata(&footer)
        .map_err(|e| Error::bad_input(format!("{shown}: corrupt Parquet footer: {e}")))?;
    let meta = ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::default())
        .map_err(|e| Error::bad_input(format!("{shown}: corrupt Parquet footer: {e}")))?;
    Ok(Footer {
        meta,
        sha256: format!("{:x}", Sha256::digest(&footer)),
        size: object.size,
        identity: object.version.clone(),
    })
}

/// Record batches of one object, fetched range by range as the decoder
/// asks for them.
pub(crate) struct ObjectBatches {
    object: ObjectFile,
    shown: String,
    decoder: ParquetPushDecoder,
}

impl ObjectBatches {
    /// A reader of `plan`'s columns and rows of `object`.
    pub(crate) fn new(
        object: &ObjectFile,
        shown: &str,
        meta: &ArrowReaderMetadata,
        plan: ReadPlan,
    ) -> Result<ObjectBatches, Error> {
        let builder = plan.apply(ParquetPushDecoderBuilder::new_with_metadata(meta.clone()));
        let decoder = builder
            .build()
            .map_err(|e| Error::bad_input(format!("{shown}: {e}")))?;
        Ok(ObjectBatches {
            object: object.clone(),
            shown: shown.to_string(),
            decoder,
        })
    }

    /// The next batch; a failed request is an [`Error`] of its class, a
    /// failed decode the decoder's message.
    pub(crate) fn next_batch(&mut self) -> Option<Result<RecordBatch, Failure>> {
        loop {
            match self.decoder.try_decode() {
                Ok(DecodeResult::Data(batch)) => return Some(Ok(batch)),
                Ok(DecodeResult::Finished) => return None,
                Ok(DecodeResult::NeedsData(ranges)) => match self.object.ranges(&ranges) {
                    Ok(data) => {
                        if let Err(e) = self.decoder.push_ranges(ranges, data) {
                            return Some(Err(Failure::Decode(e.to_string())));
                        }
                    }
                    Err(e) => return Some(Err(Failure::Store(store_error(&self.shown, &e)))),
                },
                Err(e) => return Some(Err(Failure::Decode(e.to_string()))),
            }
        }
    }
}
