module mvproxy.invalid/bench/realcp

go 1.22
