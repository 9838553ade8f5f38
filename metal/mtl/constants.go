package mtl

import (
	"math"
	"sort"
)

// dataType is an MTLDataType (MTLDataType.h); only the scalar types function constants use here.
type dataType uint

const (
	dataTypeFloat dataType = 3
	dataTypeInt   dataType = 29
	dataTypeUInt  dataType = 33
	dataTypeBool  dataType = 53
)

// FunctionConstants are values for a kernel's [[function_constant(index)]] declarations,
// applied when a function is specialised (newFunctionWithName:constantValues:error:). The zero
// value holds no constants. Setting an index again replaces its value.
type FunctionConstants struct {
	vals []constant // sorted by index
}

type constant struct {
	index int
	typ   dataType
	bits  uint32 // bool: 0 or 1; int, uint, float: the 32-bit pattern
}

// SetBool sets a bool constant.
func (c *FunctionConstants) SetBool(index int, v bool) {
	var b uint32
	if v {
		b = 1
	}
	c.set(constant{index, dataTypeBool, b})
}

// SetUint sets a uint (32-bit) constant.
func (c *FunctionConstants) SetUint(index int, v uint32) { c.set(constant{index, dataTypeUInt, v}) }

// SetInt sets an int (32-bit) constant.
func (c *FunctionConstants) SetInt(index int, v int32) {
	c.set(constant{index, dataTypeInt, uint32(v)})
}

// SetFloat sets a float constant.
func (c *FunctionConstants) SetFloat(index int, v float32) {
	c.set(constant{index, dataTypeFloat, math.Float32bits(v)})
}

// Len reports how many constants are set.
func (c *FunctionConstants) Len() int {
	if c == nil {
		return 0
	}
	return len(c.vals)
}

func (c *FunctionConstants) set(v constant) {
	i := sort.Search(len(c.vals), func(i int) bool { return c.vals[i].index >= v.index })
	if i < len(c.vals) && c.vals[i].index == v.index {
		c.vals[i] = v
		return
	}
	c.vals = append(c.vals, constant{})
	copy(c.vals[i+1:], c.vals[i:])
	c.vals[i] = v
}

// clone copies c so a Function keeps the values it was specialised with.
func (c *FunctionConstants) clone() *FunctionConstants {
	if c.Len() == 0 {
		return nil
	}
	return &FunctionConstants{vals: append([]constant(nil), c.vals...)}
}
