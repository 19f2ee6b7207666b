package protocol_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/cbdash/cbdash/sdk/protocol"
)

// invisible are characters of Unicode category Cf that make a name look
// like another one: each kind the collector refuses in names.
var invisible = []struct {
	name string
	r    rune
}{
	{"zero width space", 0x200b},
	{"zero width non-joiner", 0x200c},
	{"zero width joiner", 0x200d},
	{"word joiner", 0x2060},
	{"invisible separator", 0x2063},
	{"byte order mark (zero width no-break space)", 0xfeff},
	{"soft hyphen", 0xad},
	{"left-to-right mark", 0x200e},
	{"right-to-left mark", 0x200f},
	{"arabic letter mark", 0x61c},
	{"mongolian vowel separator", 0x180e},
	{"interlinear annotation anchor", 0xfff9},
	{"tag latin small letter a", 0xe0061},
}

// Every name a hello or a batch carries refuses an invisible format
// character, saying which one and where; texts keep them (a reason may
// quote an error message in any script).
func TestNamesRefuseInvisibleFormatCharacters(t *testing.T) {
	for _, c := range invisible {
		if !unicode.Is(unicode.Cf, c.r) {
			t.Fatalf("%s U+%04X is not in category Cf", c.name, c.r)
		}
		name := "pay" + string(c.r) + "ments" // the character at byte 3
		where := fmt.Sprintf("U+%04X at byte 3", c.r)
		t.Run(c.name, func(t *testing.T) {
			for _, f := range []struct {
				field  string
				hello  func(*protocol.Hello)
				batch  func(*protocol.Batch)
				wanted string
			}{
				{field: "service", hello: func(h *protocol.Hello) { h.Service = name }},
				{field: "instance", hello: func(h *protocol.Hello) { h.Instance = name }},
				{field: "breakers[0].name", hello: func(h *protocol.Hello) { h.Breakers[0].Name = name }},
				{field: "label key", hello: func(h *protocol.Hello) { h.Labels[name] = "x" }},
				{field: `label "team"`, hello: func(h *protocol.Hello) { h.Labels["team"] = name }},
				{field: "breakers[0].settings key", hello: func(h *protocol.Hello) {
					h.Breakers[0].Settings = protocol.NewSettings(map[string]string{name: "1"})
				}},
				{field: "windows[0].breaker", batch: func(b *protocol.Batch) { b.Windows[0].Breaker = name }},
				{field: "transitions[0].breaker", batch: func(b *protocol.Batch) { b.Transitions[0].Breaker = name }},
			} {
				want := f.field + " contains the invisible format character " + where
				if f.hello != nil {
					h := validHello()
					f.hello(&h)
					checkErr(t, h.Validate(), want)
					continue
				}
				b := validBatch()
				f.batch(&b)
				h := validHello()
				checkErr(t, b.Validate(&h, 0), want)
			}
			cmd := protocol.Command{ID: "c1", Breaker: name, Action: protocol.ActionForceOpen}
			checkErr(t, cmd.Validate(), "breaker contains the invisible format character "+where)
			checkErr(t, protocol.CheckName("name", name), "name contains the invisible format character "+where)

			b := validBatch()
			b.Transitions[0].Cause.Reason = "timeout " + string(c.r) + " talking to payments"
			h := validHello()
			checkErr(t, b.Validate(&h, 0), "") // a text may hold it
		})
	}
}

// Names in any script, with marks and emoji that are not format
// characters, stay valid.
func TestNamesAcceptWhatIsVisible(t *testing.T) {
	for _, name := range []string{"payments", "zahlungs-dienst", "支払い", "مدفوعات", "hindi-भुगतान", "café", "cafe\u0301", "db🙂"} {
		if err := protocol.CheckName("name", name); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", name, err)
		}
	}
	if err := protocol.CheckName("name", strings.Repeat("x", protocol.MaxNameLen+1)); err == nil {
		t.Error("CheckName accepts a name longer than MaxNameLen")
	}
}

// lookAlikes are, range by range, the first and last code points of
// Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt:
// Other_Default_Ignorable_Code_Point + Cf + Variation_Selector -
// White_Space - FFF9..FFFB - 13430..1343F - Prepended_Concatenation_Mark),
// then the spaces, separators and blanks that show as nothing or as a
// space. kind is the word the refusal uses: "format" for category Cf,
// "ignorable" for the rest of the set.
var lookAlikes = []struct {
	r    rune
	kind string
}{
	{0x00ad, "format"},
	{0x034f, "ignorable"}, // combining grapheme joiner
	{0x061c, "format"},
	{0x115f, "ignorable"}, {0x1160, "ignorable"}, // Hangul choseong, jungseong fillers
	{0x17b4, "ignorable"}, {0x17b5, "ignorable"}, // Khmer inherent vowels
	{0x180b, "ignorable"}, {0x180e, "format"}, {0x180f, "ignorable"}, // Mongolian variation selectors
	{0x200b, "format"}, {0x200f, "format"},
	{0x2060, "format"}, {0x2065, "ignorable"}, {0x206f, "format"},
	{0x3164, "ignorable"},                        // Hangul filler
	{0xfe00, "ignorable"}, {0xfe0f, "ignorable"}, // variation selectors 1 and 16
	{0xfeff, "format"},
	{0xffa0, "ignorable"}, // halfwidth Hangul filler
	{0xfff0, "ignorable"}, {0xfff8, "ignorable"},
	{0x1bca0, "format"}, {0x1bca3, "format"},
	{0x1d173, "format"}, {0x1d17a, "format"},
	{0xe0000, "ignorable"}, {0xe0001, "format"}, {0xe007f, "format"},
	{0xe0100, "ignorable"}, {0xe01ef, "ignorable"}, // variation selectors 17 and 256
	{0xe0fff, "ignorable"},
	// Spaces other than U+0020 (Zs), the separators (Zl, Zp), blanks.
	{0x00a0, "space"}, {0x1680, "space"}, {0x2000, "space"}, {0x200a, "space"},
	{0x202f, "space"}, {0x205f, "space"}, {0x3000, "space"},
	{0x2028, "space"}, {0x2029, "space"},
	{0x2800, "blank"}, {0x1d159, "blank"},
}

// A name holding a character that shows as nothing or as a space is
// refused, naming the code point and where it is: "look\u034f" and
// "look\u3164" would be listed as services beside "look".
func TestNamesRefuseLookAlikes(t *testing.T) {
	for _, c := range lookAlikes {
		where := fmt.Sprintf("U+%04X at byte 4", c.r)
		want := "contains the invisible " + c.kind + " character " + where
		checkErr(t, protocol.CheckName("name", "look"+string(c.r)+"ing"), "name "+want)
		checkErr(t, protocol.CheckName("name", "look"+string(c.r)), "name "+want) // at the end too
		h := validHello()
		h.Service = "look" + string(c.r)
		checkErr(t, h.Validate(), "service "+want)
		h = validHello()
		h.Instance = "look" + string(c.r)
		checkErr(t, h.Validate(), "instance "+want)
		h = validHello()
		h.Breakers[0].Name = "look" + string(c.r)
		checkErr(t, h.Validate(), "breakers[0].name "+want)
		b := validBatch()
		b.Transitions[0].Cause.Reason = "timeout" + string(c.r) + "talking to payments"
		checkErr(t, b.Validate(new(validHello()), 0), "") // a text may hold it
	}
	for _, c := range []struct{ name, want string }{
		{" look", "name contains the invisible leading space character U+0020 at byte 0"},
		{"look ", "name contains the invisible trailing space character U+0020 at byte 4"},
		{"\u0301look", "name contains the combining mark U+0301 at byte 0, with no letter before it"},
		{"\u20dd", "name contains the combining mark U+20DD at byte 0"},
	} {
		checkErr(t, protocol.CheckName("name", c.name), c.want)
	}
}

// What real names hold stays accepted: letters of any script, combining
// marks after a letter, an ASCII space inside a name, emoji.
func TestNamesAcceptRealNames(t *testing.T) {
	for _, name := range []string{
		"café", "cafe\u0301", "Müller-Zahlung", "año", "señal", "支払い", "결제", "платежи", "Ελληνικά",
		"hindi-भुगतान", "مدفوعات", "ไทย", "payments api", "db🙂", "a\u0308\u0301", "ẞ",
	} {
		if err := protocol.CheckName("name", name); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", name, err)
		}
	}
}
