// Package parts is the control of TestThePartsCheckSeesAReach: a loop with two parts, reached into
// three ways.
package parts

type loop struct {
	b *book
	o *other
}

type book struct{ n int }

func newBook() *book { return &book{n: 1} } // a constructor fills its own part

func (b *book) add() { b.n++ }

type other struct {
	back *loop
}

func (o *other) spill(b *book) { b.n = 0 }

func (l *loop) cycle() {
	l.b.add()
	_ = l.b.n
	l.o.spill(l.b)
}
