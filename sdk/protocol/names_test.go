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
