// Package rltask holds verifiable tasks for reinforcement learning: problems
// whose answer a program can check exactly, so a completion's reward is
// 1 (right) or 0 (wrong) with no learned judge.
//
// Built-in tasks generate their problems from a seed: add (two integers
// of Digits digits), reverse (a string of Length letters) and sort (a
// string of Length digits). Problem i of a seed is drawn from its own
// seeded PCG (math/rand/v2), never the global source, so every machine,
// wasm included, sees the same prompts for the same seed and index. A
// jsonl task reads its problems, {"prompt": ..., "answer": ...} per line,
// from a file.
//
// Every task shares one prompt convention (docs/JOBS.md, "Verifiable
// tasks"): the prompt ends with "=", the answer follows it, and a newline
// ends the answer. Reward compares a completion, cut at its first newline,
// with the answer exactly.
//
// The same problems, written as prompt+answer+"\n", make a text data set for
// supervised fine-tuning (dataset type task).
package rltask
