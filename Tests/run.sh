#!/usr/bin/env bash
# Runs every test: installs what the tests need, builds everything, runs the Swift test
# suite (unit, real-process, out-of-tree plugin), then the script suites (fuzzing
# smoke, network namespaces, the radio VM lab) where their tools exist.
# Prints one closing line: "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
bash packaging/dev-setup.sh || exit 1

passed=0; failed=0
log=$(mktemp)

echo "== build"
swift build --build-tests > "$log" 2>&1 || { tail -n 60 "$log"; echo "build failed"; exit 1; }
tail -n 3 "$log"

echo "== swift test"
swift test --skip-build 2>&1 | tee "$log" | grep -E "^(Test Suite|Test Case .*(failed|skipped))|error:|Executed" | grep -v "^Test Suite '.*' started" | tail -n 80
# XCTest's total line: "Executed N tests, with M failures (K unexpected)".
total=$(grep -E "^[[:space:]]*Executed [0-9]+ tests?, with [0-9]+ failures?" "$log" | tail -1)
n=$(echo "$total" | sed -E 's/.*Executed ([0-9]+) tests?.*/\1/')
f=$(echo "$total" | sed -E 's/.*with ([0-9]+) failures?.*/\1/')
if [ -z "$total" ]; then echo "swift test produced no summary"; tail -n 40 "$log"; failed=$((failed + 1)); else
  passed=$((passed + n - f)); failed=$((failed + f)); fi

# Script suites: each prints its own result and exits non-zero on failure; exit 77 = skipped.
for suite in Tests/Fuzz/run.sh Plugins/*/Tests/netns/run.sh Tests/vmlab/run-tests.sh; do
  [ -x "$suite" ] || [ -f "$suite" ] || continue
  echo "== $suite"
  bash "$suite"
  rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); elif [ $rc -eq 77 ]; then echo "(skipped)"; else failed=$((failed + 1)); fi
done

rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
