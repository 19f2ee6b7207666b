package templates

import "strconv"

// num formats an SVG coordinate with at most one decimal.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
