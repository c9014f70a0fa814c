//! PostgreSQL's binary `COPY` format, written and read: the header, then tuples of
//! length-prefixed fields in network byte order, then a trailer. Written for sample ingest (no
//! text to format or parse); read for millions of rows (a site-day's step records), where
//! decoding each row as a query result costs more than the database takes to send it
//! (BENCHMARKS.md, the 10,240-GPU fleet-day profiled).
//!
//! Pure: the caller sends what [`Writer`] builds, and feeds [`Reader`] the chunks a connection
//! delivers, in order; a tuple may span chunks.

/// The binary format's signature, then its flags and header-extension length (both 0 here).
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01T00:00:00Z).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// A binary COPY's bytes, built a tuple at a time.
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// The header, with room for about `bytes` more.
    pub fn new(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(SIGNATURE.len() + 8 + bytes + 2);
        buf.extend_from_slice(SIGNATURE);
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&0u32.to_be_bytes());
        Writer { buf }
    }

    /// Starts a tuple of `fields` fields; the caller writes each in order.
    pub fn tuple(&mut self, fields: i16) {
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }

    /// A `bigint`, or NULL.
    pub fn i64(&mut self, value: Option<i64>) {
        match value {
            Some(v) => {
                self.buf.extend_from_slice(&8i32.to_be_bytes());
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
            None => self.buf.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    /// A `timestamptz` given as µs since the Unix epoch.
    pub fn timestamp_us(&mut self, unix_us: i64) {
        self.i64(Some(unix_us - PG_EPOCH_US));
    }

    /// A `boolean`.
    pub fn bool(&mut self, value: bool) {
        self.buf.extend_from_slice(&1i32.to_be_bytes());
        self.buf.push(u8::from(value));
    }

    /// The bytes, trailer included.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CopyError {
    #[error("not PostgreSQL's binary COPY format")]
    Signature,
    #[error("a tuple of {found} fields where {expected} were asked for")]
    Fields { expected: usize, found: i16 },
    #[error("field {field}: {len} bytes where {expected} were expected")]
    Width {
        field: usize,
        len: i32,
        expected: usize,
    },
    #[error("field {field} is NULL where a value is required")]
    Null { field: usize },
    #[error("data after the trailer, or the stream ended inside a tuple")]
    Framing,
}

/// One tuple's fields, read in order.
pub struct Fields<'a> {
    data: &'a [u8],
    field: usize,
}

impl Fields<'_> {
    fn next(&mut self, expected: usize) -> Result<Option<&[u8]>, CopyError> {
        let field = self.field;
        self.field += 1;
        let Some(len) = self.data.get(..4) else {
            // Asked for more fields than the tuple has.
            return Err(CopyError::Framing);
        };
        let len = i32::from_be_bytes(len.try_into().expect("four bytes"));
        if len < 0 {
            self.data = &self.data[4..];
            return Ok(None);
        }
        if len as usize != expected {
            return Err(CopyError::Width {
                field,
                len,
                expected,
            });
        }
        let (value, rest) = self.data[4..].split_at(expected);
        self.data = rest;
        Ok(Some(value))
    }

    /// A `bigint`, or `None` for NULL.
    pub fn i64(&mut self) -> Result<Option<i64>, CopyError> {
        Ok(self
            .next(8)?
            .map(|b| i64::from_be_bytes(b.try_into().expect("eight bytes"))))
    }

    /// A `timestamptz` as µs since the Unix epoch, or `None` for NULL.
    pub fn timestamp_us(&mut self) -> Result<Option<i64>, CopyError> {
        Ok(self.i64()?.map(|us| us + PG_EPOCH_US))
    }

    /// A `boolean`, or `None` for NULL.
    pub fn bool(&mut self) -> Result<Option<bool>, CopyError> {
        Ok(self.next(1)?.map(|b| b[0] != 0))
    }

    /// The next field as required: NULL is an error.
    pub fn required<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<Option<T>, CopyError>,
    ) -> Result<T, CopyError> {
        let field = self.field;
        read(self)?.ok_or(CopyError::Null { field })
    }
}

/// Reads tuples of `fields` fields from the chunks of one binary COPY, in order.
pub struct Reader {
    fields: usize,
    /// Bytes of an incomplete tuple (or header) carried to the next chunk.
    pending: Vec<u8>,
    header_read: bool,
    ended: bool,
}

impl Reader {
    pub fn new(fields: usize) -> Self {
        Reader {
            fields,
            pending: Vec::new(),
            header_read: false,
            ended: false,
        }
    }

    /// Hands each complete tuple in `chunk` (with what earlier chunks left) to `row`.
    pub fn feed<E: From<CopyError>>(
        &mut self,
        chunk: &[u8],
        mut row: impl FnMut(&mut Fields) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.pending.is_empty() {
            let used = self.tuples(chunk, &mut row)?;
            self.pending.extend_from_slice(&chunk[used..]);
        } else {
            let mut data = std::mem::take(&mut self.pending);
            data.extend_from_slice(chunk);
            let used = self.tuples(&data, &mut row)?;
            data.drain(..used);
            self.pending = data;
        }
        Ok(())
    }

    /// Checks the stream ended where it should: after the trailer, nothing left over.
    pub fn finish(self) -> Result<(), CopyError> {
        if self.ended && self.pending.is_empty() {
            Ok(())
        } else {
            Err(CopyError::Framing)
        }
    }

    /// Reads the header (once) and the complete tuples at the start of `data`; returns how
    /// many bytes it used.
    fn tuples<E: From<CopyError>>(
        &mut self,
        data: &[u8],
        row: &mut impl FnMut(&mut Fields) -> Result<(), E>,
    ) -> Result<usize, E> {
        let mut at = 0;
        if !self.header_read {
            // Signature, flags, and the header extension's length (then its bytes).
            if data.len() < SIGNATURE.len() + 8 {
                return Ok(0);
            }
            if &data[..SIGNATURE.len()] != SIGNATURE {
                return Err(CopyError::Signature.into());
            }
            let ext_at = SIGNATURE.len() + 4;
            let ext = u32::from_be_bytes(data[ext_at..ext_at + 4].try_into().expect("4")) as usize;
            if data.len() < ext_at + 4 + ext {
                return Ok(0);
            }
            at = ext_at + 4 + ext;
            self.header_read = true;
        }
        while at + 2 <= data.len() {
            if self.ended {
                return Err(CopyError::Framing.into());
            }
            let count = i16::from_be_bytes([data[at], data[at + 1]]);
            if count == -1 {
                self.ended = true;
                at += 2;
                continue;
            }
            if count as usize != self.fields || count < 0 {
                return Err(CopyError::Fields {
                    expected: self.fields,
                    found: count,
                }
                .into());
            }
            // The tuple's length, if all of it is here.
            let mut end = at + 2;
            let mut whole = true;
            for _ in 0..self.fields {
                if end + 4 > data.len() {
                    whole = false;
                    break;
                }
                let len = i32::from_be_bytes(data[end..end + 4].try_into().expect("4"));
                end += 4 + len.max(0) as usize;
            }
            if !whole || end > data.len() {
                break;
            }
            row(&mut Fields {
                data: &data[at + 2..end],
                field: 0,
            })?;
            at = end;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `(bigint, timestamptz, bigint NULL, boolean)` row.
    type Row = (i64, i64, Option<i64>, bool);

    /// A binary COPY of `rows`, as PostgreSQL writes it.
    fn copy_of(rows: &[Row]) -> Vec<u8> {
        let mut w = Writer::new(0);
        for &(a, ts_us, c, flag) in rows {
            w.tuple(4);
            w.i64(Some(a));
            w.timestamp_us(ts_us);
            w.i64(c);
            w.bool(flag);
        }
        w.finish()
    }

    fn read(chunks: &[&[u8]]) -> Result<Vec<Row>, CopyError> {
        let mut reader = Reader::new(4);
        let mut rows = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, |f: &mut Fields| {
                rows.push((
                    f.required(Fields::i64)?,
                    f.required(Fields::timestamp_us)?,
                    f.i64()?,
                    f.required(Fields::bool)?,
                ));
                Ok::<_, CopyError>(())
            })?;
        }
        reader.finish()?;
        Ok(rows)
    }

    const ROWS: [Row; 3] = [
        // 2026-09-01T00:00:00Z, before PostgreSQL's epoch and at it.
        (7, 1_788_220_800_000_000, Some(1_234_567_890_123), false),
        (-1, 0, None, true),
        (i64::MAX, PG_EPOCH_US, Some(0), false),
    ];

    #[test]
    fn rows_read_back_whole_or_cut_anywhere() {
        let bytes = copy_of(&ROWS);
        assert_eq!(read(&[&bytes]).unwrap(), ROWS);
        // Every cut point, and one byte at a time: a tuple or the header across chunks.
        for cut in 0..=bytes.len() {
            assert_eq!(
                read(&[&bytes[..cut], &bytes[cut..]]).unwrap(),
                ROWS,
                "cut at {cut}"
            );
        }
        let bytes_one: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read(&bytes_one).unwrap(), ROWS);
    }

    #[test]
    fn malformed_streams_are_errors_not_rows() {
        let bytes = copy_of(&ROWS);
        // Truncated: the trailer (or part of a tuple) never came.
        assert_eq!(read(&[&bytes[..bytes.len() - 2]]), Err(CopyError::Framing));
        assert_eq!(read(&[&bytes[..bytes.len() - 5]]), Err(CopyError::Framing));
        // Something after the trailer.
        let mut extra = bytes.clone();
        extra.extend_from_slice(&4i16.to_be_bytes());
        assert_eq!(read(&[&extra]), Err(CopyError::Framing));
        // Not the binary format (a text COPY).
        assert_eq!(
            read(&[b"7\t2026-09-01 00:00:00+00\t\\N\tf\n"]),
            Err(CopyError::Signature)
        );
        // A NULL where a value is required, and a field of the wrong width.
        let null_first = copy_of(&[(1, 0, None, false)]);
        let mut reader = Reader::new(4);
        let err = reader
            .feed(&null_first, |f: &mut Fields| {
                f.i64()?;
                f.timestamp_us()?;
                f.required(Fields::i64)?;
                Ok::<_, CopyError>(())
            })
            .unwrap_err();
        assert_eq!(err, CopyError::Null { field: 2 });
        let mut reader = Reader::new(4);
        let err = reader
            .feed(&null_first, |f: &mut Fields| {
                f.i64()?;
                f.timestamp_us()?;
                f.i64()?;
                f.i64()?;
                Ok::<_, CopyError>(())
            })
            .unwrap_err();
        assert_eq!(
            err,
            CopyError::Width {
                field: 3,
                len: 1,
                expected: 8
            }
        );
        // Tuples of another width than asked.
        assert_eq!(
            Reader::new(5).feed(&bytes, |_: &mut Fields| Ok::<_, CopyError>(())),
            Err(CopyError::Fields {
                expected: 5,
                found: 4
            })
        );
    }
}
