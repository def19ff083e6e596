mod all_tests;
