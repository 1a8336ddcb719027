// Units shared by the contribute and admin pages.
'use strict';

const FLOP_UNITS = ['FLOP', 'kFLOP', 'MFLOP', 'GFLOP', 'TFLOP', 'PFLOP', 'EFLOP', 'ZFLOP', 'YFLOP'];

// fmtFlops writes a count of floating-point operations with an SI prefix
// and three significant digits: 1234567 → "1.23 MFLOP".
function fmtFlops(f) {
  if (typeof f !== 'number' || !Number.isFinite(f) || f < 0) return '–';
  let i = 0;
  while (f >= 999.5 && i < FLOP_UNITS.length - 1) {
    f /= 1000;
    i++;
  }
  const s = i === 0 ? String(Math.round(f)) : f >= 99.95 ? f.toFixed(0) : f >= 9.995 ? f.toFixed(1) : f.toFixed(2);
  return s + ' ' + FLOP_UNITS[i];
}
