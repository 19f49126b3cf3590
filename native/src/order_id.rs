//! Order ids: 20 ASCII digits `region(1) yymmdd(6) source(1) sequence(11) check(1)`, the check
//! digit being Damm's over the first 19 (docs/architecture.md section 4). Plain-Rust API first, PyO3 layer last.

use std::fmt;

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

pub const ORDER_ID_LEN: usize = 20;
pub const SEQUENCE_LIMIT: i64 = 100_000_000_000;
pub const REGION_NORTH: u8 = 1;
pub const REGION_SOUTH: u8 = 2;
pub const SOURCE_REDIS: u8 = 0;
pub const SOURCE_DB: u8 = 1;

/// The order-10 weakly totally anti-symmetric quasigroup of H. M. Damm (2004), zero diagonal.
const DAMM: [[u8; 10]; 10] = [
    [0, 3, 1, 7, 5, 9, 8, 6, 4, 2],
    [7, 0, 9, 2, 1, 5, 4, 8, 6, 3],
    [4, 2, 0, 6, 8, 7, 1, 3, 5, 9],
    [1, 7, 5, 0, 9, 8, 3, 4, 2, 6],
    [6, 1, 2, 3, 0, 4, 5, 9, 7, 8],
    [3, 6, 7, 4, 2, 0, 9, 5, 8, 1],
    [5, 8, 6, 9, 7, 2, 0, 1, 3, 4],
    [8, 9, 4, 5, 3, 6, 2, 0, 1, 7],
    [9, 4, 3, 8, 6, 1, 7, 2, 0, 5],
    [2, 5, 8, 1, 4, 3, 6, 7, 9, 0],
];

/// Damm's interim digit over ASCII digits: the check digit to append, or 0 when the input already
/// ends with a correct one. `None` if any byte is not an ASCII digit.
pub fn damm(ascii_digits: &[u8]) -> Option<u8> {
    ascii_digits.iter().try_fold(0u8, |interim, &c| {
        let d = c.checked_sub(b'0').filter(|d| *d < 10)?;
        DAMM.get(usize::from(interim))?.get(usize::from(d)).copied()
    })
}

/// A numeric field of the id, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Region,
    Date,
    Source,
    Sequence,
}

impl Field {
    pub fn accepts(self, value: i64) -> bool {
        match self {
            Field::Region => value == i64::from(REGION_NORTH) || value == i64::from(REGION_SOUTH),
            Field::Date => is_calendar_date(value),
            Field::Source => value == i64::from(SOURCE_REDIS) || value == i64::from(SOURCE_DB),
            Field::Sequence => (0..SEQUENCE_LIMIT).contains(&value),
        }
    }

    /// The message for an out-of-range `value` of this field; `value` is any decimal rendering so
    /// that ints beyond i64 (seen only at the Python boundary) read the same.
    pub fn message(self, value: &dyn fmt::Display) -> String {
        match self {
            Field::Region => format!("order id region: {value} is not 1 (north) or 2 (south)"),
            Field::Date => {
                format!("order id date: yymmdd {value} is not a calendar date in 2000-2099")
            }
            Field::Source => format!("order id source: {value} is not 0 (redis) or 1 (db)"),
            Field::Sequence => format!("order id sequence: {value} is not in [0, 10**11)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderIdError {
    /// Length in characters (code points), not bytes.
    Length(usize),
    /// Index (in characters) of the first character that is not an ASCII digit.
    Digit(usize),
    CheckDigit {
        expected: u8,
        found: u8,
    },
    Invalid(Field, i64),
}

impl fmt::Display for OrderIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderIdError::Length(n) => write!(f, "order id length: expected {ORDER_ID_LEN} characters, got {n}"),
            OrderIdError::Digit(i) => {
                write!(f, "order id digits: character {i} is not an ASCII digit")
            }
            OrderIdError::CheckDigit { expected, found } => {
                write!(f, "order id check digit: expected {expected}, got {found}")
            }
            OrderIdError::Invalid(field, value) => f.write_str(&field.message(value)),
        }
    }
}

impl std::error::Error for OrderIdError {}

impl From<OrderIdError> for PyErr {
    fn from(err: OrderIdError) -> PyErr {
        PyValueError::new_err(err.to_string())
    }
}

/// Whether `yymmdd` is a real date of year 2000 + yy (Gregorian; 2000 is a leap year).
pub fn is_calendar_date(yymmdd: i64) -> bool {
    if !(0..=991_231).contains(&yymmdd) {
        return false;
    }
    let (yy, mm, dd) = (yymmdd / 10_000, yymmdd / 100 % 100, yymmdd % 100);
    let days = match mm {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if yy % 4 == 0 => 29,
        2 => 28,
        _ => 0,
    };
    (1..=days).contains(&dd)
}

/// The validated fields of an order id (private, so every value is a valid id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OrderIdParts {
    region: u8,
    yymmdd: u32,
    source: u8,
    sequence: u64,
}

impl OrderIdParts {
    /// Validates in argument order: region, date, source, sequence.
    pub fn new(region: i64, yymmdd: i64, source: i64, sequence: i64) -> Result<Self, OrderIdError> {
        for (field, value) in [
            (Field::Region, region),
            (Field::Date, yymmdd),
            (Field::Source, source),
            (Field::Sequence, sequence),
        ] {
            if !field.accepts(value) {
                return Err(OrderIdError::Invalid(field, value));
            }
        }
        // Every value was range-checked above, so the narrowing casts are exact.
        Ok(OrderIdParts {
            region: region as u8,
            yymmdd: yymmdd as u32,
            source: source as u8,
            sequence: sequence as u64,
        })
    }

    pub fn region(&self) -> u8 {
        self.region
    }

    pub fn yymmdd(&self) -> u32 {
        self.yymmdd
    }

    pub fn source(&self) -> u8 {
        self.source
    }

    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Day of month (1..=31): picks the day table.
    pub fn day(&self) -> u8 {
        (self.yymmdd % 100) as u8
    }

    /// The 20 ASCII digits of the id, check digit included.
    pub fn to_ascii(&self) -> [u8; ORDER_ID_LEN] {
        let mut out = [b'0'; ORDER_ID_LEN];
        let fields = [
            (u64::from(self.region), 1),
            (u64::from(self.yymmdd), 6),
            (u64::from(self.source), 1),
            (self.sequence, 11),
        ];
        let mut pos = 0;
        for (value, width) in fields {
            if let Some(slot) = out.get_mut(pos..pos + width) {
                write_digits(slot, value);
            }
            pos += width;
        }
        let check = out.get(..ORDER_ID_LEN - 1).and_then(damm).unwrap_or(0);
        if let Some(last) = out.last_mut() {
            *last = b'0' + check;
        }
        out
    }
}

impl fmt::Display for OrderIdParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ascii = self.to_ascii();
        f.write_str(std::str::from_utf8(&ascii).map_err(|_| fmt::Error)?)
    }
}

fn write_digits(slot: &mut [u8], mut value: u64) {
    for c in slot.iter_mut().rev() {
        *c = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn digits_value(ascii: &[u8]) -> u64 {
    ascii
        .iter()
        .fold(0, |acc, c| acc * 10 + u64::from(c.wrapping_sub(b'0')))
}

/// Validates and renders an id.
pub fn encode(region: i64, yymmdd: i64, source: i64, sequence: i64) -> Result<String, OrderIdError> {
    OrderIdParts::new(region, yymmdd, source, sequence).map(|p| p.to_string())
}

/// Parses an id, checking in order: length, digits, check digit, region, date, source.
pub fn decode(s: &str) -> Result<OrderIdParts, OrderIdError> {
    let b = s.as_bytes();
    if b.len() != ORDER_ID_LEN || !b.iter().all(u8::is_ascii_digit) {
        return Err(shape_error(s, s.chars().count()));
    }
    let expected = b.get(..ORDER_ID_LEN - 1).and_then(damm).unwrap_or(0);
    let found = b.last().map_or(0, |c| c.wrapping_sub(b'0'));
    if expected != found {
        return Err(OrderIdError::CheckDigit { expected, found });
    }
    let field = |from: usize, to: usize| b.get(from..to).map_or(0, digits_value) as i64;
    OrderIdParts::new(field(0, 1), field(1, 7), field(7, 8), field(8, 19))
}

/// The length or digit error of a string `chars` code points long that is not 20 ASCII digits.
pub fn shape_error(s: &str, chars: usize) -> OrderIdError {
    if chars != ORDER_ID_LEN {
        return OrderIdError::Length(chars);
    }
    let position = s.chars().position(|c| !c.is_ascii_digit()).unwrap_or(0);
    OrderIdError::Digit(position)
}

pub fn is_valid(s: &str) -> bool {
    decode(s).is_ok()
}

// ---- Python layer ----

/// An `int` argument as i64; `Err(decimal)` for ints outside i64 (TypeError for non-ints).
pub(crate) fn int_arg(obj: &Bound<'_, PyAny>) -> PyResult<Result<i64, String>> {
    match obj.extract::<i64>() {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => Ok(Err(obj.str()?.to_cow()?.into_owned())),
        Err(e) => Err(e),
    }
}

/// Runs `f` on the id's text; a str that is not valid UTF-8 (lone surrogates) cannot be an id and
/// gets the same length/digit error the reference gives.
pub(crate) fn with_id_str<T>(
    s: &Bound<'_, PyString>,
    f: impl FnOnce(&str) -> Result<T, OrderIdError>,
) -> PyResult<Result<T, OrderIdError>> {
    match s.to_str() {
        Ok(text) => Ok(f(text)),
        Err(_) => {
            let chars = s.len()?;
            Ok(Err(shape_error(&s.to_string_lossy(), chars)))
        }
    }
}

/// The fields of a decoded order id.
#[pyclass(frozen, eq, hash, name = "OrderIdParts", module = "hongbao_native")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyOrderIdParts(OrderIdParts);

#[pymethods]
impl PyOrderIdParts {
    #[getter]
    fn region(&self) -> u8 {
        self.0.region
    }
    #[getter]
    fn yymmdd(&self) -> u32 {
        self.0.yymmdd
    }
    #[getter]
    fn day(&self) -> u8 {
        self.0.day()
    }
    #[getter]
    fn source(&self) -> u8 {
        self.0.source
    }
    #[getter]
    fn sequence(&self) -> u64 {
        self.0.sequence
    }
    fn __repr__(&self) -> String {
        let p = &self.0;
        format!(
            "OrderIdParts(region={}, yymmdd={}, day={}, source={}, sequence={})",
            p.region,
            p.yymmdd,
            p.day(),
            p.source,
            p.sequence
        )
    }
}

#[pyfunction]
fn encode_order_id(
    region: &Bound<'_, PyAny>,
    yymmdd: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    sequence: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let args = [
        (Field::Region, int_arg(region)?),
        (Field::Date, int_arg(yymmdd)?),
        (Field::Source, int_arg(source)?),
        (Field::Sequence, int_arg(sequence)?),
    ];
    let mut values = [0i64; 4];
    for (slot, (field, arg)) in values.iter_mut().zip(args) {
        match arg {
            Ok(v) if field.accepts(v) => *slot = v,
            Ok(v) => return Err(OrderIdError::Invalid(field, v).into()),
            Err(huge) => return Err(PyValueError::new_err(field.message(&huge))),
        }
    }
    let [region, yymmdd, source, sequence] = values;
    Ok(encode(region, yymmdd, source, sequence)?)
}

#[pyfunction]
fn decode_order_id(s: &Bound<'_, PyString>) -> PyResult<PyOrderIdParts> {
    Ok(PyOrderIdParts(with_id_str(s, decode)??))
}

#[pyfunction]
fn is_valid_order_id(s: &Bound<'_, PyAny>) -> bool {
    s.cast::<PyString>()
        .ok()
        .and_then(|s| s.to_str().ok())
        .is_some_and(is_valid)
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOrderIdParts>()?;
    m.add_function(wrap_pyfunction!(encode_order_id, m)?)?;
    m.add_function(wrap_pyfunction!(decode_order_id, m)?)?;
    m.add_function(wrap_pyfunction!(is_valid_order_id, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn damm_matches_the_published_example() {
        assert_eq!(damm(b"572"), Some(4));
        assert_eq!(damm(b"5724"), Some(0));
        assert_eq!(damm(b"57a"), None);
    }

    #[test]
    fn damm_table_is_weakly_totally_anti_symmetric() {
        for (i, row) in DAMM.iter().enumerate() {
            assert_eq!(row[i], 0);
            let mut seen = [false; 10];
            row.iter().for_each(|&v| seen[usize::from(v)] = true);
            assert!(seen.iter().all(|s| *s));
        }
        let op = |a: u8, b: u8| DAMM[usize::from(a)][usize::from(b)];
        for c in 0..10u8 {
            for x in 0..10u8 {
                for y in 0..10u8 {
                    if op(op(c, x), y) == op(op(c, y), x) {
                        assert_eq!(x, y);
                    }
                }
            }
        }
    }

    #[test]
    fn golden_ids() {
        assert_eq!(encode(1, 240229, 0, 42).unwrap(), "12402290000000000421");
        assert_eq!(
            encode(2, 991231, 1, SEQUENCE_LIMIT - 1).unwrap(),
            "29912311999999999997"
        );
        assert_eq!(encode(1, 101, 0, 0).unwrap(), "10001010000000000004");
    }

    #[test]
    fn calendar_dates() {
        assert!(is_calendar_date(240229));
        assert!(is_calendar_date(229));
        assert!(!is_calendar_date(250229));
        assert!(!is_calendar_date(240431));
        assert!(!is_calendar_date(241301));
        assert!(!is_calendar_date(240100));
        assert!(!is_calendar_date(-1));
        assert!(!is_calendar_date(1_000_101));
    }

    #[test]
    fn encode_errors_name_the_field() {
        assert_eq!(encode(3, 240101, 0, 0), Err(OrderIdError::Invalid(Field::Region, 3)));
        assert_eq!(encode(1, 240230, 0, 0), Err(OrderIdError::Invalid(Field::Date, 240230)));
        assert_eq!(encode(1, 240101, 2, 0), Err(OrderIdError::Invalid(Field::Source, 2)));
        assert_eq!(
            encode(1, 240101, 0, -1),
            Err(OrderIdError::Invalid(Field::Sequence, -1))
        );
        assert_eq!(
            encode(1, 240101, 0, SEQUENCE_LIMIT).map_err(|e| e.to_string()),
            Err("order id sequence: 100000000000 is not in [0, 10**11)".to_string())
        );
    }

    #[test]
    fn decode_errors_in_order() {
        assert_eq!(decode(""), Err(OrderIdError::Length(0)));
        assert_eq!(decode("1240229000000000042"), Err(OrderIdError::Length(19)));
        assert_eq!(decode("1240229000000000042é"), Err(OrderIdError::Digit(19)));
        assert_eq!(decode("124022900000000004é"), Err(OrderIdError::Length(19)));
        assert_eq!(
            decode("12402290000000000423"),
            Err(OrderIdError::CheckDigit { expected: 1, found: 3 })
        );
        let with_check = |body: &str| format!("{body}{}", damm(body.as_bytes()).unwrap());
        assert_eq!(
            decode(&with_check("3240229000000000042")),
            Err(OrderIdError::Invalid(Field::Region, 3))
        );
        assert_eq!(
            decode(&with_check("1240230000000000042")),
            Err(OrderIdError::Invalid(Field::Date, 240230))
        );
        assert_eq!(
            decode(&with_check("1240229200000000042")),
            Err(OrderIdError::Invalid(Field::Source, 2))
        );
    }

    fn parts() -> impl Strategy<Value = (i64, i64, i64, i64)> {
        (
            1i64..=2,
            0i64..=99,
            1i64..=12,
            1i64..=31,
            0i64..=1,
            0i64..SEQUENCE_LIMIT,
        )
            .prop_filter_map("calendar date", |(r, yy, mm, dd, s, q)| {
                let d = yy * 10_000 + mm * 100 + dd;
                is_calendar_date(d).then_some((r, d, s, q))
            })
    }

    proptest! {
        #[test]
        fn round_trip((r, d, s, q) in parts()) {
            let id = encode(r, d, s, q).unwrap();
            prop_assert_eq!(id.len(), ORDER_ID_LEN);
            let p = decode(&id).unwrap();
            prop_assert_eq!((i64::from(p.region), i64::from(p.yymmdd), i64::from(p.source), p.sequence as i64), (r, d, s, q));
            prop_assert_eq!(i64::from(p.day()), d % 100);
        }

        #[test]
        fn single_substitutions_and_adjacent_swaps_are_rejected((r, d, s, q) in parts(), pos in 0usize..20, digit in 0u8..10) {
            let id = encode(r, d, s, q).unwrap().into_bytes();
            let mut changed = id.clone();
            changed[pos] = b'0' + digit;
            if changed != id {
                prop_assert!(!is_valid(std::str::from_utf8(&changed).unwrap()));
            }
            if pos < 19 && id[pos] != id[pos + 1] {
                let mut swapped = id.clone();
                swapped.swap(pos, pos + 1);
                prop_assert!(!is_valid(std::str::from_utf8(&swapped).unwrap()));
            }
        }

        #[test]
        fn decode_never_panics(s in "\\PC{0,24}") {
            let _ = decode(&s);
        }

        #[test]
        fn decode_never_panics_on_digits(s in "[0-9]{20}") {
            if let Ok(p) = decode(&s) {
                prop_assert_eq!(p.to_string(), s);
            }
        }
    }
}
