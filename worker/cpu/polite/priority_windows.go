package polite

// belowNormal is BELOW_NORMAL_PRIORITY_CLASS.
const belowNormal = 0x4000

// LowerPriority puts this process in the below-normal priority class.
func LowerPriority() error {
	if r, _, err := procSetPriorityClass.Call(^uintptr(0), belowNormal); r == 0 { // ^0: the current process
		return err
	}
	return nil
}
