module github.com/caphost/caphost/bench

go 1.26.8

replace github.com/caphost/caphost => ../
