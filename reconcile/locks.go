package reconcile

import "sync"

// leafMutex is a part's lock that is a leaf of the loop's lock order: taken alone or under any other
// lock, and while it is held nothing is called that could take another (no method of the loop or of
// another part). TestLeafLocksCallNothing (test/archtest) reads every region that holds one.
type leafMutex struct{ sync.Mutex }
