// keeps fp8sim_test_support non-empty
