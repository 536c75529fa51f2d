homa_add_test(test_workload SOURCES test_workload.c)
